// NcclLink: a DeviceLink (device_link.h) over NCCL, between the ranks' GPUs.
//
// Its own communicator (never the training's) and its own stream on the
// rank's GPU; NCCL itself is loaded at run time (libnccl.so.2: the one a CUDA
// torch already loaded, else the system's), so a build with CUDA runs, and
// falls back to the job's transport, where NCCL is missing. A transfer moves
// through `staging_bytes` of device memory in two halves: while one half is
// on the wire, the next chunk is copied into the other (send), or the last one
// out of it (receive); a rank holds no other device memory for the link.
//
// Built when CMake found CUDA and nccl.h (MEMENTO_WITH_CUDA); elsewhere
// CreateNcclLink answers FailedPrecondition.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "memento/common/status.h"
#include "memento/runtime/device_link.h"
#include "memento/runtime/transport.h"

namespace memento::runtime {

struct NcclLinkOptions {
  size_t staging_bytes = size_t{16} << 20;    // both halves
  std::chrono::milliseconds timeout{300000};  // a transfer without progress for this long fails
};

// Whether this build has the NCCL link, and whether this process can load
// NCCL and see a GPU (the reason when not, for logs).
bool NcclLinkBuilt();
Status NcclLinkUsable();

// Collective over `control`, every rank at once: rank 0's NCCL id travels
// by one Allgather, every rank joins a communicator of control.size() ranks
// on `device`, and one AllTrue agrees on the outcome, so that every rank gets
// a link or every rank an error (the first rank's reason).
Result<std::shared_ptr<DeviceLink>> CreateNcclLink(Transport& control, int device,
                                                   const NcclLinkOptions& options = {});

}  // namespace memento::runtime
