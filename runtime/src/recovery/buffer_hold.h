#pragma once

#include <condition_variable>
#include <mutex>

namespace memento::runtime {

// BufferHold: the registered buffers are still being read by a restore's
// background work, so the application must not write them yet.
//
// A lost node's rank restores straight into its registered buffers and
// resumes; its node store, new and still being reserved, gets the restored
// shard on the commit thread afterwards. Checkpointer::WaitSnapshot(), which
// the application calls before writing the buffers (as after a Save), waits
// for that copy as it waits for a snapshot's. Thread-safe.
class BufferHold {
 public:
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  void WaitReleased() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !held_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

}  // namespace memento::runtime
