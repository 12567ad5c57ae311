// The processes `memento launch` starts for one launch of the job, and the
// per-rank exec wrapper they run.
//
// mpirun (the default): one process,
//   mpirun [--allow-run-as-root] -np NP SELF launch --rank-exec DIR -- COMMAND...
// torchrun: one agent per virtual node k (what a cluster runs per machine),
//   torchrun --nnodes N --node_rank k --nproc_per_node R --master_addr 127.0.0.1
//            --master_port PORT --max_restarts 0 --rdzv_id JOB --no_python
//            SELF launch --rank-exec DIR -- COMMAND...
// Static rendezvous gives node k the ranks k*R .. k*R+R-1, the same numbering
// as mpirun's virtual nodes. torchrun's own restarts are off (--max_restarts
// 0): the launcher relaunches the whole job after a failure, as it does
// mpirun, so the timeline counts every relaunch.
// srun would map the same way: one task per rank (`srun -N N
// --ntasks-per-node R SELF launch --rank-exec ...`), the wrapper reading
// SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; not built.
#pragma once

#include <string>
#include <vector>

#include "memento/launch/launcher.h"

namespace memento::launch {

// The command lines to start for launch `attempt` (each in a process group of
// its own); `port`: a free TCP port on this machine for the job's rendezvous
// (torchrun's store; MASTER_PORT of an mpirun job that sets none).
std::vector<std::vector<std::string>> JobCommands(const LaunchOptions& options,
                                                  const std::string& status_dir, int port);

// A TCP port that was free a moment ago on every address (0 when none could be
// had), chosen below the kernel's ephemeral range when that leaves room.
int FreePort();
// The first port of the kernel's ephemeral range (ip_local_port_range).
int EphemeralPortsFrom();

}  // namespace memento::launch
