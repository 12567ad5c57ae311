#include "job_flag.h"

#include <string>

#include "flags.h"
#include "memento/runtime/config.h"

namespace memento::cli {

void AddJobOption(CLI::App* cmd, std::string* job) {
  cmd->add_option("--job", *job, "the job id (MEMENTO_JOB of the job's processes)")
      ->required()
      ->type_name("J");
}

void CheckJobFlag(const std::string& job) {
  // runtime's ValidateJobId is the rule; its message names MEMENTO_JOB, the variable the
  // job's processes read, so the flag's own message is written here.
  if (!runtime::ValidateJobId(job).ok()) {
    throw UsageError("--job '" + job + "': a job id is 1..48 characters from [A-Za-z0-9_-]");
  }
}

}  // namespace memento::cli
