// The settings every rank of a job must share, agreed on at Prepare.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpointer_impl.h"
#include "memento/common/strings.h"

namespace memento::runtime {

Result<std::vector<std::string>> Checkpointer::Impl::AgreeOnSettings(
    const std::string& identity, const std::vector<uint8_t>& rider,
    std::vector<std::vector<uint8_t>>* riders) {
  // Settings every rank must share: the protocol (who sends what, which
  // steps save, which collectives run where) follows from them, and a rank
  // that differs would leave the others waiting for the timeout instead.
  const Config& c = config_;
  const std::vector<std::pair<const char*, std::string>> mine = {
      {"MEMENTO_JOB", c.job},
      {"MEMENTO_SCHEME", c.scheme},
      {"MEMENTO_CHUNK_BYTES", std::to_string(c.chunk_bytes)},
      {"MEMENTO_INTERVAL",
       c.interval == Config::kAutoInterval ? "auto" : std::to_string(c.interval)},
      {"MEMENTO_NODE_MTBF_H",
       c.interval == Config::kAutoInterval ? std::to_string(c.node_mtbf_h) : "(unused)"},
      {"MEMENTO_REMOTE", remote_ ? "(set)" : "(none)"},
      {"MEMENTO_REMOTE_FORMAT", remote_ ? c.remote_format : "(unused)"},
      {"MEMENTO_PERSIST_EVERY", std::to_string(c.persist_every)},
      {"MEMENTO_ELASTIC", c.elastic ? "1" : "0"},
      {"MEMENTO_BACKGROUND_REPROTECT", c.background_reprotect ? "1" : "0"},
      {"MEMENTO_RESUME_FINISHED", c.resume_finished ? "1" : "0"},
      {"MEMENTO_TRANSPORT_DEVICE", c.device_transport},
  };
  std::string record;
  for (const auto& [name, value] : mine) record += value + '\n';
  // The node identity and the rider ride along (no collective of their
  // own): u32 record length, u32 identity length, u8 whether a rider
  // follows, the record, the identity, the rider.
  const uint32_t length = static_cast<uint32_t>(record.size());
  const uint32_t id_length = static_cast<uint32_t>(identity.size());
  const uint8_t has_rider = rider.empty() ? 0 : 1;
  std::string sent(reinterpret_cast<const char*>(&length), sizeof(length));
  sent.append(reinterpret_cast<const char*>(&id_length), sizeof(id_length));
  sent.push_back(static_cast<char>(has_rider));
  sent += record + identity;
  sent.append(rider.begin(), rider.end());
  MEMENTO_ASSIGN_OR_RETURN(auto raw, transport_->Allgather(sent.data(), sent.size()));
  std::vector<std::vector<uint8_t>> all;
  std::vector<std::string> identities;
  std::vector<std::vector<uint8_t>> theirs;
  bool every_rider = true;
  constexpr size_t kHead = 2 * sizeof(uint32_t) + 1;
  for (size_t r = 0; r < raw.size(); ++r) {
    uint32_t n = 0, m = 0;
    if (raw[r].size() >= kHead) {
      std::memcpy(&n, raw[r].data(), sizeof(n));
      std::memcpy(&m, raw[r].data() + sizeof(n), sizeof(m));
    }
    if (raw[r].size() < kHead || raw[r].size() - kHead < uint64_t{n} + m) {
      return Status::Corruption("rank " + std::to_string(r) + "'s settings record is cut short");
    }
    every_rider = every_rider && raw[r][2 * sizeof(uint32_t)] != 0;
    const auto begin = raw[r].begin() + kHead;
    all.emplace_back(begin, begin + n);
    identities.emplace_back(begin + n, begin + n + m);
    theirs.emplace_back(begin + n + m, raw[r].end());
  }
  // Every rank sees the same records, so every rank fails alike.
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> a = Split(std::string(all[0].begin(), all[0].end()), '\n');
    const std::vector<std::string> b = Split(std::string(all[r].begin(), all[r].end()), '\n');
    for (size_t i = 0; i < mine.size(); ++i) {
      const std::string va = i < a.size() ? a[i] : "?", vb = i < b.size() ? b[i] : "?";
      if (va == vb) continue;
      return Status::InvalidArgument(std::string(mine[i].first) +
                                     " differs between ranks: rank 0 has '" + va + "', rank " +
                                     std::to_string(r) + " has '" + vb +
                                     "'; every rank of a job must run with the same value");
    }
    return Status::InvalidArgument("the ranks' settings differ (rank 0 and rank " +
                                   std::to_string(r) + ")");
  }
  riders->clear();
  if (every_rider) *riders = std::move(theirs);
  return identities;
}

}  // namespace memento::runtime
