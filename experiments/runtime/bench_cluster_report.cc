// bench_cluster's report (bench_cluster_report.h): the ratios derived from the
// gathered measurements, printed as a readable block or as one JSON record.
#include "bench_cluster_report.h"

#include <algorithm>
#include <cstdio>

#include "emulated_links.h"
#include "memento/runtime/shm_segment.h"

namespace memento::runtime::bench_cluster {
namespace {

using bench::kLinkBurstBytes;

double Mean(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return v.empty() ? 0 : t / v.size();
}
double MinOf(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double MaxOf(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

}  // namespace

std::string LostNodesText(const std::vector<int>& nodes) {
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) out += (i ? "," : "") + std::to_string(nodes[i]);
  return out;
}

nlohmann::ordered_json JsonHead(const std::string& scheme, int nodes) {
  nlohmann::ordered_json j;
  j["benchmark"] = "bench_cluster";
  j["scheme"] = scheme;
  j["nodes"] = nodes;
  return j;
}

namespace {

// What the printed report derives from the gathered one.
struct Derived {
  std::vector<double> traffic, hwm, ckpt, shm;           // per node sums
  std::vector<double> ckpt_ratio, shm_ratio, hwm_ratio;  // per node, vs its formula
  double node_s = 0;                                     // shard bytes per node
  double formula_nominal = 0, formula = 0;  // the scheme's K; the formed groups' worst node
  double protect_gibps = 0, protect_min_gibps = 0, shard_gibps = 0;
  double mpi_raw_gibps = 0, mpi_gibps = 0, ratio = 0;
  // Bytes per second restored into each lost node during its transfer phase
  // against the baseline ring's per-direction bandwidth: both move S bytes
  // per node, so it is the ring's time over the lost nodes' transfer time.
  double transfer_vs_ring = 0;
  // CPU seconds of all ranks per GiB of traffic (sent + received, all ranks),
  // and the share of the machine's cores busy (CPU s / (cores x wall s)).
  double protect_cpu_per_gib = 0, mpi_cpu_per_gib = 0, cpu_ratio = 0;
  double protect_util = 0, mpi_util = 0;
  double xor_ring_cpu_per_gib = 0;                // the XOR ring reduce-scatter's; 0 when not run
  double recover_sent = 0, recover_received = 0;  // the busiest rank's
  double recover_cpu_s = 0;                       // all ranks', inside Restore()
  bool bit_exact = true;
};

Derived Derive(const Options& opt, const Report& r, double factor,
               const std::vector<double>& node_factor) {
  constexpr double gib = 1024.0 * 1024 * 1024;
  Derived d;
  const int nodes = r.nodes, per = r.ranks_per_node;
  d.traffic.assign(nodes, 0);
  d.hwm.assign(nodes, 0);
  d.ckpt.assign(nodes, 0);
  d.shm.assign(nodes, 0);
  for (int i = 0; i < r.ranks; ++i) {
    const RankStats& x = r.per_rank[i];
    d.traffic[i / per] += x.protect_bytes;
    d.hwm[i / per] += x.hwm;
    d.ckpt[i / per] += x.hwm - x.rss_before;
    d.shm[i / per] += x.shm_bytes;
  }
  d.node_s = static_cast<double>(opt.size) * per;
  d.formula_nominal = factor * d.node_s * r.slots;
  for (int n = 0; n < nodes; ++n) {
    const double f = node_factor[n] * d.node_s * r.slots;
    d.ckpt_ratio.push_back(d.ckpt[n] / f);
    d.shm_ratio.push_back(d.shm[n] / f);
    d.hwm_ratio.push_back(d.hwm[n] / f);
  }
  d.formula = MaxOf(node_factor) * d.node_s * r.slots;
  d.protect_gibps = Mean(d.traffic) / r.protect_s / gib;
  d.protect_min_gibps = MinOf(d.traffic) / r.protect_s / gib;
  d.shard_gibps = d.node_s / r.protect_s / gib;
  const double raw_ring_s = std::min(r.ring_chunked_s, r.ring_single_s);
  d.mpi_raw_gibps = 2 * d.node_s / raw_ring_s / gib;
  const double ring_s = opt.link_gibps > 0 ? r.ring_link_s : raw_ring_s;
  d.mpi_gibps = 2 * d.node_s / ring_s / gib;
  d.ratio = d.protect_gibps / d.mpi_gibps;
  if (r.lost_transfer_s > 0) d.transfer_vs_ring = ring_s / r.lost_transfer_s;
  double protect_cpu = 0, protect_bytes = 0, ring_cpu = 0, ring_bytes = 0;
  double xor_cpu = 0, xor_bytes = 0;
  for (const auto& x : r.per_rank) {
    xor_cpu += x.xor_ring_cpu_s;
    xor_bytes += x.xor_ring_bytes_total;
    protect_cpu += x.protect_cpu_s;
    protect_bytes += x.protect_bytes_total;
    ring_cpu += x.ring_cpu_s;
    ring_bytes += x.ring_bytes_total;
    d.recover_sent = std::max(d.recover_sent, x.recover_sent);
    d.recover_cpu_s += x.recover_cpu_s;
    d.recover_received = std::max(d.recover_received, x.recover_received);
    d.bit_exact = d.bit_exact && x.restored_ok > 0;
  }
  d.protect_cpu_per_gib = protect_cpu / (protect_bytes / gib);
  d.mpi_cpu_per_gib = ring_cpu / (ring_bytes / gib);
  d.cpu_ratio = d.mpi_cpu_per_gib / d.protect_cpu_per_gib;
  if (xor_bytes > 0) d.xor_ring_cpu_per_gib = xor_cpu / (xor_bytes / gib);
  const double cores = r.cores > 0 ? r.cores : 1;
  d.protect_util = protect_cpu / (cores * r.protect_wall_s);
  d.mpi_util = ring_cpu / (cores * r.ring_wall_s);
  return d;
}

std::vector<long long> Ints(const std::vector<double>& v) {
  std::vector<long long> out;
  for (double x : v) out.push_back(static_cast<long long>(x));
  return out;
}

void PrintJson(const Options& opt, const Report& r, const Derived& d) {
  const double s = static_cast<double>(opt.size);
  nlohmann::ordered_json j = JsonHead(opt.scheme, r.nodes);
  j["ranks_per_node"] = r.ranks_per_node;
  j["shard_bytes"] = d.node_s;
  j["slots"] = r.slots;
  j["threads"] = r.threads;
  j["chunk_bytes"] = r.chunk;
  j["reps"] = opt.reps;
  j["ranks"] = r.ranks;
  j["cores"] = r.cores;
  j["shm_huge"] = ShmSegment::HugePages();
  j["link_gibps"] = opt.link_gibps;
  j["link_burst_bytes"] = opt.link_gibps > 0 ? kLinkBurstBytes : 0.0;
  j["protect_s"] = r.protect_s;
  j["snapshot_s"] = r.snapshot_s;
  j["protect_after_snapshot_s"] = r.after_snapshot_s;
  j["protect_traffic_node_mean_bytes"] = Mean(d.traffic);
  j["protect_node_gibps"] = d.protect_gibps;
  j["protect_node_min_gibps"] = d.protect_min_gibps;
  j["protect_shard_gibps"] = d.shard_gibps;
  j["mpi_ring_chunked_s"] = r.ring_chunked_s;
  j["mpi_ring_single_s"] = r.ring_single_s;
  j["mpi_ring_link_s"] = r.ring_link_s;
  j["mpi_raw_node_gibps"] = d.mpi_raw_gibps;
  j["mpi_node_gibps"] = d.mpi_gibps;
  j["protect_cpu_s_per_gib"] = d.protect_cpu_per_gib;
  j["mpi_cpu_s_per_gib"] = d.mpi_cpu_per_gib;
  j["cpu_ratio"] = d.cpu_ratio;
  j["protect_cpu_util"] = d.protect_util;
  j["mpi_cpu_util"] = d.mpi_util;
  j["xor_ring_s"] = r.xor_ring_s;
  j["xor_ring_cpu_s_per_gib"] = d.xor_ring_cpu_per_gib;
  j["protect_vs_xor_ring"] = r.xor_ring_s > 0 ? r.xor_ring_s / r.protect_s : 0.0;
  j["parity_vs_xor_ring"] =
      r.xor_ring_s > 0 && r.after_snapshot_s > 0 ? r.xor_ring_s / r.after_snapshot_s : 0.0;
  j["protect_cpu_vs_xor_ring"] =
      d.xor_ring_cpu_per_gib > 0 ? d.xor_ring_cpu_per_gib / d.protect_cpu_per_gib : 0.0;
  j["protect_vs_mpi"] = d.ratio;
  j["protect_min_vs_mpi"] = d.protect_min_gibps / d.mpi_gibps;
  j["target_protect_vs_mpi"] = 0.8;
  j["protect_target_met"] = d.ratio >= 0.8;
  j["lost_node"] = opt.lose[0];
  j["lost_nodes"] = opt.lose;
  j["restored_version"] = r.restored_version;
  j["restore_bit_exact"] = d.bit_exact;
  j["recover_source"] = r.source_detail;
  j["prepare_s"] = r.prepare_s;
  j["recover_s"] = r.recover_s;
  j["inventory_s"] = r.inventory_s;
  j["plan_s"] = r.plan_s;
  j["transfer_s"] = r.transfer_s;
  j["lost_transfer_s"] = r.lost_transfer_s;
  j["transfer_vs_ring"] = d.transfer_vs_ring;
  j["reprotect_s"] = r.reprotect_s;
  j["reprotect_mode"] = r.reprotect_mode;
  j["protected_s"] = r.protected_s;
  // Over a link: the least time the replacements need to receive their shards
  // (each lost node its S x ranks_per_node over its own link, in parallel).
  const double link_bound_s = opt.link_gibps > 0
                                  ? static_cast<double>(opt.size) * r.ranks_per_node /
                                        (opt.link_gibps * 1024.0 * 1024 * 1024)
                                  : 0.0;
  j["link_bound_s"] = link_bound_s;
  j["resume_vs_link_bound"] = link_bound_s > 0 ? r.recover_s / link_bound_s : 0.0;
  j["protected_vs_link_bound"] = link_bound_s > 0 ? r.protected_s / link_bound_s : 0.0;
  j["recover_max_sent_bytes"] = d.recover_sent;
  j["recover_max_received_bytes"] = d.recover_received;
  // CPU of the restore: all ranks' CPU seconds inside Restore(), per GiB
  // restored into the lost nodes, and the share of the cores it kept busy.
  const double restored_gib =
      s * r.ranks_per_node * static_cast<double>(opt.lose.size()) / (1024.0 * 1024 * 1024);
  j["recover_cpu_s"] = d.recover_cpu_s;
  j["recover_cpu_s_per_gib"] = d.recover_cpu_s / restored_gib;
  j["recover_cpu_util"] = d.recover_cpu_s / ((r.cores > 0 ? r.cores : 1) * r.recover_s);
  j["remote_bytes"] = s * r.ranks;
  j["remote_warm_s"] = r.remote_warm_s;
  j["remote_cold_s"] = r.remote_cold_s;
  j["recover_vs_remote_warm"] = r.recover_s / r.remote_warm_s;
  j["recover_vs_remote_cold"] = r.recover_s / r.remote_cold_s;
  j["resume_s"] = r.resume_s;
  j["recover_incl_prepare_vs_remote_cold"] = r.resume_s / r.remote_cold_s;
  j["resume_incl_prepare_vs_transfer"] =
      r.lost_transfer_s > 0 ? r.resume_s / r.lost_transfer_s : 0.0;
  j["remote_gibps"] = r.remote_gibps;
  j["remote_gibps_auto"] = opt.remote_gibps < 0;
  j["remote_link_s"] = r.remote_link_s;
  j["recover_vs_remote_link"] = r.remote_link_s > 0 ? r.recover_s / r.remote_link_s : 0.0;
  j["rss_formula_nominal_node_bytes"] = d.formula_nominal;
  j["rss_formula_node_bytes"] = d.formula;
  j["vmhwm_node_max_bytes"] = MaxOf(d.hwm);
  j["rss_ckpt_node_max_bytes"] = MaxOf(d.ckpt);
  j["shm_node_max_bytes"] = MaxOf(d.shm);
  j["rss_ckpt_vs_formula_max"] = MaxOf(d.ckpt_ratio);
  j["rss_ckpt_vs_formula_min"] = MinOf(d.ckpt_ratio);
  j["shm_vs_formula_max"] = MaxOf(d.shm_ratio);
  j["vmhwm_vs_formula_max"] = MaxOf(d.hwm_ratio);
  j["protect_traffic_node_bytes"] = Ints(d.traffic);
  j["rss_ckpt_node_bytes"] = Ints(d.ckpt);
  j["shm_node_bytes"] = Ints(d.shm);
  std::printf("%s\n", j.dump().c_str());
}

void PrintText(const Options& opt, const Report& r, const Derived& d) {
  const double mib = 1024.0 * 1024;
  std::printf(
      "%s N=%d S=%.0f MiB slots=%d ranks=%d cores=%d link=%s\n"
      "  protect   %.3f s (snapshot %.3f s), traffic/node %.1f MiB -> %.3f GiB/s/node "
      "(min node %.3f); %s ring %.3f GiB/s/node (raw MPI %.3f) -> ratio %.3f (target 0.8)\n"
      "  cpu       protect %.2f s/GiB (cores %.0f%% busy), ring %.2f s/GiB (%.0f%%) -> cpu_ratio "
      "%.3f\n"
      "  recover   node(s) %s: resumed after %.3f s, protected after %.3f s (inventory %.4f "
      "plan %.4f transfer %.3f, lost nodes' %.3f = %.3f of the ring per direction; "
      "reprotect %.3f %s; prepare %.3f) vs remote read %.3f s warm / "
      "%.3f s cold -> %.3f / %.3f; %s\n"
      "  xor ring  reduce-scatter %.3f s, %.2f CPU s/GiB -> protect_vs_xor_ring %.3f, "
      "parity_vs_xor_ring %.3f (after the snapshot: %.3f s; 0: not run)\n"
      "  fs        whole job through %.3f GiB/s (%s): %.3f s -> recover / fs %.3f\n"
      "  memory    formula %.0f MiB/node; VmHWM-baseline max %.0f MiB (%.3f), shm %.0f MiB "
      "(%.3f), VmHWM %.0f MiB\n",
      opt.scheme.c_str(), r.nodes, static_cast<double>(opt.size) / mib, r.slots, r.ranks, r.cores,
      opt.link_gibps > 0 ? (std::to_string(opt.link_gibps) + " GiB/s").c_str() : "off", r.protect_s,
      r.snapshot_s, Mean(d.traffic) / mib, d.protect_gibps, d.protect_min_gibps,
      opt.link_gibps > 0 ? "link" : "MPI", d.mpi_gibps, d.mpi_raw_gibps, d.ratio,
      d.protect_cpu_per_gib, 100 * d.protect_util, d.mpi_cpu_per_gib, 100 * d.mpi_util, d.cpu_ratio,
      LostNodesText(opt.lose).c_str(), r.recover_s, r.protected_s, r.inventory_s, r.plan_s,
      r.transfer_s, r.lost_transfer_s, d.transfer_vs_ring, r.reprotect_s, r.reprotect_mode.c_str(),
      r.prepare_s, r.remote_warm_s, r.remote_cold_s, r.recover_s / r.remote_warm_s,
      r.recover_s / r.remote_cold_s, d.bit_exact ? "bit-exact" : "RESTORE MISMATCH", r.xor_ring_s,
      d.xor_ring_cpu_per_gib, r.xor_ring_s > 0 ? r.xor_ring_s / r.protect_s : 0.0,
      r.xor_ring_s > 0 && r.after_snapshot_s > 0 ? r.xor_ring_s / r.after_snapshot_s : 0.0,
      r.after_snapshot_s, r.remote_gibps, opt.remote_gibps < 0 ? "auto" : "set", r.remote_link_s,
      r.remote_link_s > 0 ? r.recover_s / r.remote_link_s : 0.0, d.formula / mib,
      MaxOf(d.ckpt) / mib, MaxOf(d.ckpt_ratio), MaxOf(d.shm) / mib, MaxOf(d.shm_ratio),
      MaxOf(d.hwm) / mib);
}

}  // namespace

void Print(const Options& opt, const Report& r, double factor,
           const std::vector<double>& node_factor) {
  const Derived d = Derive(opt, r, factor, node_factor);
  if (opt.json) {
    PrintJson(opt, r, d);
  } else {
    PrintText(opt, r, d);
  }
  std::fflush(stdout);
}

}  // namespace memento::runtime::bench_cluster
