// The settings every rank of a job must share, agreed on at Prepare.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpointer_impl.h"
#include "memento/common/strings.h"

namespace memento::runtime {

Result<std::vector<std::string>> Checkpointer::Impl::AgreeOnSettings(const std::string& identity) {
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
  // The node identity rides along (no collective of its own): the record,
  // then the identity, split at the record's length, sent first.
  const uint32_t length = static_cast<uint32_t>(record.size());
  std::string sent(reinterpret_cast<const char*>(&length), sizeof(length));
  sent += record + identity;
  MEMENTO_ASSIGN_OR_RETURN(auto raw, transport_->Allgather(sent.data(), sent.size()));
  std::vector<std::vector<uint8_t>> all;
  std::vector<std::string> identities;
  for (size_t r = 0; r < raw.size(); ++r) {
    uint32_t n = 0;
    if (raw[r].size() >= sizeof(n)) std::memcpy(&n, raw[r].data(), sizeof(n));
    if (raw[r].size() < sizeof(n) || raw[r].size() - sizeof(n) < n) {
      return Status::Corruption("rank " + std::to_string(r) + "'s settings record is cut short");
    }
    const auto begin = raw[r].begin() + sizeof(n);
    all.emplace_back(begin, begin + n);
    identities.emplace_back(begin + n, raw[r].end());
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
  return identities;
}

}  // namespace memento::runtime
