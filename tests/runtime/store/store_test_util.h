// Helpers shared by the node-store tests: unique job ids and cleanup.
#pragma once

#include <unistd.h>

#include <atomic>
#include <string>

#include "memento/runtime/store_admin.h"
#include "test_job.h"

namespace memento::runtime::testing {

// A job id unique to this process and call, so that parallel test processes
// never share segments.
inline std::string UniqueJob(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "t" + tag + "-" + ProcessTag() + "-" + std::to_string(counter++);
}

// Unlinks every segment of a job when it goes out of scope.
class JobCleaner {
 public:
  explicit JobCleaner(std::string job) : job_(std::move(job)) {}
  ~JobCleaner() { (void)CleanJob(job_); }
  const std::string& job() const { return job_; }

 private:
  std::string job_;
};

}  // namespace memento::runtime::testing
