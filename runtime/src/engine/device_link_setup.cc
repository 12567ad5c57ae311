// The device link of a Checkpointer (MEMENTO_TRANSPORT_DEVICE), set up at Prepare.
#include <memory>
#include <string>

#include "engine/checkpointer_impl.h"
#include "memento/runtime/device_link.h"
#include "memento/runtime/log.h"
#include "memento/runtime/nccl_link.h"

namespace memento::runtime {

Status Checkpointer::Impl::SetUpDeviceLink() {
  if (config_.device_transport == "off") return Status::Ok();
  // A transport the application routed already (or a re-Prepare) stays as is.
  if (std::dynamic_pointer_cast<DeviceRoutedTransport>(transport_)) return Status::Ok();
  int device = -1;
  for (const RegisteredEntry& e : entries_) {
    if (e.device()) {
      device = e.gpu;
      break;
    }
  }
  Status mine = NcclLinkUsable();
  if (mine.ok() && device < 0) {
    mine = Status::FailedPrecondition("no registered buffer of this rank is on a GPU");
  }
  const LogLevel level = config_.device_transport == "nccl" ? LogLevel::kWarn : LogLevel::kInfo;
  MEMENTO_ASSIGN_OR_RETURN(bool everyone, transport_->AllTrue(mine.ok()));
  if (!everyone) {
    Log(level, "MEMENTO_TRANSPORT_DEVICE=" + config_.device_transport +
                   ": protect and recovery stay on the job's transport (" +
                   (mine.ok() ? std::string("another rank cannot use NCCL") : mine.ToString()) +
                   ")");
    return Status::Ok();
  }
  NcclLinkOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config_.timeout_s * 1000));
  auto link = CreateNcclLink(*transport_, device, options);
  if (!link.ok()) {
    // Every rank got an error (the link agrees on its outcome): all go on without it.
    Log(level, "MEMENTO_TRANSPORT_DEVICE=" + config_.device_transport +
                   ": no NCCL link, protect and recovery stay on the job's transport (" +
                   link.status().ToString() + ")");
    return Status::Ok();
  }
  transport_ = std::make_shared<DeviceRoutedTransport>(transport_, std::move(link).value());
  Log(LogLevel::kInfo, "protect and recovery messages of at least " +
                           std::to_string(DeviceRoutedTransport::kDefaultMinBytes) +
                           " bytes go over NCCL from GPU " + std::to_string(device));
  return Status::Ok();
}

}  // namespace memento::runtime
