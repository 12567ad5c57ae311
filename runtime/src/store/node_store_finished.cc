// NodeStore's finished mark (node_store.h), in the header area of the
// segment (format::FinishedMark).
#include <cstring>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/node_store.h"
#include "store/node_store_format.h"

namespace memento::runtime {
namespace {

format::FinishedMark* MarkIn(const ShmSegment& segment) {
  return reinterpret_cast<format::FinishedMark*>(segment.data() + format::kFinishedOffset);
}

}  // namespace

Status NodeStore::MarkFinished(const FinishedRun& run) {
  MEMENTO_RETURN_IF_ERROR(CheckWritable("MarkFinished"));
  format::FinishedMark* mark = MarkIn(segment_);
  // A reader that races the rewrite sees no magic (no mark), never a torn one.
  __atomic_store_n(&mark->magic, 0u, __ATOMIC_SEQ_CST);
  format::FinishedMark m{};
  m.format = kNodeStoreFormat;
  m.job_hash = job_hash_;
  m.lineage = run.lineage;
  m.version = run.version;
  m.unix_ns = run.unix_ns;
  m.crc = erasure::Crc32c(&m, format::kFinishedCrcBytes);
  m.magic = 0;
  std::memcpy(mark, &m, sizeof(m));
  __atomic_store_n(&mark->magic, format::kFinishedMagic, __ATOMIC_RELEASE);
  return Status::Ok();
}

Status NodeStore::ClearFinished() {
  MEMENTO_RETURN_IF_ERROR(CheckWritable("ClearFinished"));
  __atomic_store_n(&MarkIn(segment_)->magic, 0u, __ATOMIC_SEQ_CST);
  return Status::Ok();
}

std::optional<FinishedRun> NodeStore::Finished() const {
  if (!segment_.valid() || segment_.size() < format::kHeaderBytes) return std::nullopt;
  const format::FinishedMark* mark = MarkIn(segment_);
  if (__atomic_load_n(&mark->magic, __ATOMIC_ACQUIRE) != format::kFinishedMagic) {
    return std::nullopt;
  }
  format::FinishedMark m;
  std::memcpy(&m, mark, sizeof(m));
  // The crc was computed with the magic zero.
  m.magic = 0;
  if (m.crc != erasure::Crc32c(&m, format::kFinishedCrcBytes) || m.format != kNodeStoreFormat ||
      m.job_hash != job_hash_) {
    return std::nullopt;
  }
  // Still marked after the copy: not rewritten meanwhile.
  if (__atomic_load_n(&mark->magic, __ATOMIC_ACQUIRE) != format::kFinishedMagic) {
    return std::nullopt;
  }
  return FinishedRun{m.lineage, m.version, m.unix_ns};
}

}  // namespace memento::runtime
