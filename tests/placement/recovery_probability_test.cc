#include "memento/placement/recovery_probability.h"

#include <gtest/gtest.h>

#include <cmath>

#include "memento/placement/recoverability.h"

namespace memento::placement {
namespace {

GroupLayout Layout(int n, const std::string& scheme) {
  auto layout = GroupLayout::Build(*Topology::Uniform(n), *Scheme::Parse(scheme));
  EXPECT_TRUE(layout.ok()) << scheme << " n=" << n;
  return *layout;
}

const char* kSchemes[] = {"none",           "replica:2",      "replica:3", "replica:4",
                          "replica:2:ring", "replica:3:ring", "xor:1",     "xor:2",
                          "xor:3",          "rs:2+2",         "rs:3+2",    "rs:4+3"};

double LogChoose(int n, int k) {
  return std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0);
}

TEST(RecoveryProbabilityTest, KnownValues) {
  // docs/architecture.md §5 and Gemini: N=16, m=2.
  EXPECT_NEAR(*ExactRecoveryProbability(Layout(16, "replica:2"), 2), 14.0 / 15, 1e-12);
  EXPECT_NEAR(*ExactRecoveryProbability(Layout(16, "replica:2:ring"), 2), 13.0 / 15, 1e-12);
  EXPECT_NEAR(*ExactRecoveryProbability(Layout(16, "replica:2"), 3), 0.8, 1e-12);
  EXPECT_NEAR(*ExactRecoveryProbability(Layout(16, "replica:2"), 1), 1.0, 1e-15);
  EXPECT_NEAR(*ExactRecoveryProbability(Layout(16, "none"), 1), 0.0, 1e-15);
  EXPECT_NEAR(*ExactRecoveryProbability(Layout(16, "rs:4+4"), 4), 1.0, 1e-15);
  EXPECT_FALSE(ExactRecoveryProbability(Layout(16, "none"), 17).ok());
  EXPECT_FALSE(ExactRecoveryProbability(Layout(16, "none"), -1).ok());
}

// Exact against brute-force enumeration of every failure set, every scheme (group, ring,
// partial last groups), N <= 16, every f.
TEST(RecoveryProbabilityTest, ExactMatchesEnumeration) {
  for (const char* scheme : kSchemes) {
    for (int n = 1; n <= 16; ++n) {
      auto layout = GroupLayout::Build(*Topology::Uniform(n), *Scheme::Parse(scheme));
      if (!layout.ok()) continue;
      std::vector<double> ok(n + 1, 0), total(n + 1, 0);
      std::vector<char> mask(n);
      for (uint32_t bits = 0; bits < (1u << n); ++bits) {
        for (int i = 0; i < n; ++i) mask[i] = (bits >> i) & 1;
        const int f = __builtin_popcount(bits);
        total[f] += 1;
        ok[f] += IsRecoverable(*layout, mask) ? 1 : 0;
      }
      auto exact = ExactRecoveryProbabilities(*layout, n);
      ASSERT_TRUE(exact.ok()) << exact.status().ToString();
      for (int f = 0; f <= n; ++f) {
        EXPECT_NEAR(exact->recover[f], ok[f] / total[f], 1e-12)
            << scheme << " n=" << n << " f=" << f;
        EXPECT_NEAR(exact->lose[f], 1 - ok[f] / total[f], 1e-12)
            << scheme << " n=" << n << " f=" << f;
      }
      // A shorter curve is a prefix of the full one.
      auto prefix = ExactRecoveryProbabilities(*layout, n / 2);
      ASSERT_TRUE(prefix.ok());
      for (int f = 0; f <= n / 2; ++f) EXPECT_EQ(prefix->recover[f], exact->recover[f]);
    }
  }
}

// Closed forms at large N.
TEST(RecoveryProbabilityTest, LargeNClosedForms) {
  const int n = 1024;
  // replica:2 group, f=2: only the N/2 pairs fail.
  EXPECT_NEAR(*ExactRecoveryProbability(Layout(n, "replica:2"), 2), 1 - 1.0 / (n - 1), 1e-12);
  // Gemini: exact for k < 2m: 1 - N C(N-m, k-m) / (m C(N, k)).
  for (int k = 2; k < 4; ++k) {
    const double gemini =
        1 - std::exp(std::log(n) + LogChoose(n - 2, k - 2) - std::log(2) - LogChoose(n, k));
    EXPECT_NEAR(*ExactRecoveryProbability(Layout(n, "replica:2"), k), gemini, 1e-12);
  }
  // replica:2 ring: no two adjacent failures on a cycle: N/(N-f) C(N-f, f) / C(N, f).
  for (int f : {2, 10, 100, 400, 512}) {
    const double ring =
        std::exp(std::log(n) - std::log(n - f) + LogChoose(n - f, f) - LogChoose(n, f));
    EXPECT_NEAR(*ExactRecoveryProbability(Layout(n, "replica:2:ring"), f), ring,
                1e-9 * ring + 1e-300)
        << f;
  }
  EXPECT_EQ(*ExactRecoveryProbability(Layout(n, "replica:2:ring"), 513), 0.0);
  // N = 1000 up to and past half the ring: the tiniest values keep their relative precision
  // (a running window sum that subtracted gave -8e-152 for 7.9e-186 at f = 450) and none
  // is negative.
  const std::vector<double> ring1000 =
      ExactRecoveryProbabilities(Layout(1000, "replica:2:ring"), 702)->recover;
  for (int f : {400, 450, 499, 500}) {
    const double ring =
        std::exp(std::log(1000) - std::log(1000 - f) + LogChoose(1000 - f, f) - LogChoose(1000, f));
    EXPECT_NEAR(ring1000[f], ring, 1e-9 * ring) << f;
  }
  for (int f = 501; f <= 702; ++f) EXPECT_EQ(ring1000[f], 0.0) << f;
  // rs:6+2 on 128 groups of 8, f = 3: lost iff all three in one group.
  const double rs = 1 - 128 * std::exp(LogChoose(8, 3) - LogChoose(n, 3));
  EXPECT_NEAR(*ExactRecoveryProbability(Layout(n, "rs:6+2"), 3), rs, 1e-12);
  // Probabilities stay in [0,1] and decrease with f, even where C(N, f) overflows a double.
  const std::vector<double> p = ExactRecoveryProbabilities(Layout(4096, "rs:4+4"), 2600)->recover;
  for (size_t f = 1; f < p.size(); ++f) {
    EXPECT_LE(p[f], p[f - 1] + 1e-12);
    EXPECT_GE(p[f], 0.0);
  }
  EXPECT_NEAR(p[4], 1.0, 1e-12);
  EXPECT_EQ(p[5 * 4096 / 8], 0.0);  // some group loses 5 of its 8 nodes
  // Ring with M copies, f = M: lost iff the failures are M consecutive nodes (N windows).
  for (int m : {3, 5, 40}) {
    const std::string scheme = "replica:" + std::to_string(m) + ":ring";
    const double expected = 1 - std::exp(std::log(n) - LogChoose(n, m));
    EXPECT_NEAR(*ExactRecoveryProbability(Layout(n, scheme), m), expected, 1e-12) << m;
    EXPECT_EQ(*ExactRecoveryProbability(Layout(n, scheme), m - 1), 1.0) << m;
  }
}

// N = 10^6, f <= 64: no underflow to 0 or rounding to 1, monotone in f, and the loss
// probability matches closed forms to relative precision even where it is ~1e-22.
TEST(RecoveryProbabilityTest, MillionNodesNoUnderflow) {
  const int n = 1000000;
  const int max_f = 64;
  struct Case {
    const char* scheme;
    int tolerance;  // failures always survived
  } cases[] = {{"replica:2", 1}, {"replica:2:ring", 1}, {"replica:3:ring", 2}, {"xor:3", 1},
               {"rs:8+2", 2},    {"rs:4+4", 4},         {"rs:6+3", 3},         {"replica:3", 2}};
  for (const Case& c : cases) {
    auto curve = ExactRecoveryProbabilities(Layout(n, c.scheme), max_f);
    ASSERT_TRUE(curve.ok()) << c.scheme << ": " << curve.status().ToString();
    ASSERT_EQ(curve->recover.size(), static_cast<size_t>(max_f + 1));
    for (int f = 0; f <= max_f; ++f) {
      if (f <= c.tolerance) {
        EXPECT_EQ(curve->recover[f], 1.0) << c.scheme << " f=" << f;
        EXPECT_EQ(curve->lose[f], 0.0) << c.scheme << " f=" << f;
        continue;
      }
      // Strictly inside (0, 1), in both forms, and monotone in f.
      EXPECT_GT(curve->recover[f], 0.0) << c.scheme << " f=" << f;
      EXPECT_GT(curve->lose[f], 0.0) << c.scheme << " f=" << f;
      EXPECT_LT(curve->lose[f], 1.0) << c.scheme << " f=" << f;
      EXPECT_LE(curve->recover[f], curve->recover[f - 1]) << c.scheme << " f=" << f;
      EXPECT_GT(curve->lose[f], curve->lose[f - 1]) << c.scheme << " f=" << f;
      EXPECT_NEAR(curve->recover[f] + curve->lose[f], 1.0, 1e-12) << c.scheme << " f=" << f;
    }
  }
  auto lose = [&](const GroupLayout& layout, int f) {
    return ExactRecoveryProbabilities(layout, f)->lose[f];
  };
  const double nd = n;
  // replica:2 group: f=2 lost iff both in one of the N/2 pairs.
  EXPECT_NEAR(lose(Layout(n, "replica:2"), 2), 1 / (nd - 1), 1e-12 / nd);
  // replica:2 ring, f=2: lost iff adjacent (N pairs); old code returned 0 from N=16458 on.
  const GroupLayout ring2 = Layout(n, "replica:2:ring");
  EXPECT_NEAR(lose(ring2, 2), 2 / (nd - 1), 1e-12 / nd);
  // f=64: no two adjacent: N/(N-f) C(N-f, f) / C(N, f), as a product (lgamma of 10^6 in a
  // double is only good to ~1e-9).
  long double ring = static_cast<long double>(n) / (n - 64);
  for (int i = 0; i < 64; ++i) ring *= static_cast<long double>(n - 64 - i) / (n - i);
  EXPECT_NEAR(*ExactRecoveryProbability(ring2, 64), static_cast<double>(ring), 1e-13);
  const double ring_loss = static_cast<double>(1 - ring);
  EXPECT_NEAR(lose(ring2, 64), ring_loss, 1e-12 * ring_loss);
  // replica:3 ring, f=3: lost iff three consecutive (N windows): N / C(N, 3), ~6e-12.
  const double r3 = 6 / ((nd - 1) * (nd - 2));
  EXPECT_NEAR(lose(Layout(n, "replica:3:ring"), 3), r3, 1e-9 * r3);
  // rs:4+4, f=5: lost iff all five in one of N/8 groups: N/8 C(8,5) / C(N,5), ~9e-22, not
  // rounded to 0.
  const double rs = 840 / ((nd - 1) * (nd - 2) * (nd - 3) * (nd - 4));
  EXPECT_NEAR(lose(Layout(n, "rs:4+4"), 5), rs, 1e-9 * rs);
  EXPECT_GT(rs, 0);
  EXPECT_LT(rs, 1e-20);
  // Out of the floating-point range: a clear error, not a wrong number.
  auto huge = ExactRecoveryProbabilities(ring2, n / 2);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("Monte Carlo"), std::string::npos);
}

// Monte Carlo agreement at up to a million nodes, where the exact value is well inside
// (0, 1).
TEST(RecoveryProbabilityTest, MonteCarloAgreesAtLargeN) {
  struct Case {
    int n;
    const char* scheme;
    int f;
  } cases[] = {{1000000, "replica:2", 800},
               {1000000, "replica:2:ring", 800},
               {1000000, "xor:3", 800},
               {10000, "replica:3:ring", 500},
               {10000, "rs:8+2", 200}};
  for (const Case& c : cases) {
    const char* scheme = c.scheme;
    const int f = c.f;
    const GroupLayout layout = Layout(c.n, scheme);
    auto exact = ExactRecoveryProbability(layout, f);
    ASSERT_TRUE(exact.ok()) << exact.status().ToString();
    EXPECT_GT(*exact, 0.01) << scheme;
    EXPECT_LT(*exact, 0.99) << scheme;
    auto mc = MonteCarloRecoveryProbability(layout, f, 4000, 3, 3.8906);  // 99.99 %
    ASSERT_TRUE(mc.ok());
    EXPECT_LE(mc->ci_low, *exact) << scheme;
    EXPECT_GE(mc->ci_high, *exact) << scheme;
  }
}

TEST(RecoveryProbabilityTest, MonteCarloLandsWithinItsIntervalOfExact) {
  struct Case {
    int n;
    const char* scheme;
    int f;
  } cases[] = {{16, "replica:2", 2}, {16, "replica:2:ring", 3},   {16, "xor:3", 2},
               {16, "rs:6+2", 4},    {64, "replica:3", 6},        {100, "rs:4+2", 8},
               {33, "replica:2", 5}, {1024, "replica:2:ring", 20}};
  int covered95 = 0;
  int runs = 0;
  for (const Case& c : cases) {
    const GroupLayout layout = Layout(c.n, c.scheme);
    const double exact = *ExactRecoveryProbability(layout, c.f);
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      // 99.9 % interval must hold; 95 % intervals must cover in most runs.
      auto wide = MonteCarloRecoveryProbability(layout, c.f, 20000, seed, 3.2905);
      ASSERT_TRUE(wide.ok());
      EXPECT_LE(wide->ci_low, exact) << c.scheme << " seed " << seed;
      EXPECT_GE(wide->ci_high, exact) << c.scheme << " seed " << seed;
      const MonteCarloEstimate e95 = WilsonInterval(wide->successes, wide->trials);
      covered95 += (e95.ci_low <= exact && exact <= e95.ci_high) ? 1 : 0;
      ++runs;
    }
  }
  EXPECT_GE(covered95, runs * 85 / 100) << covered95 << " of " << runs;
  // Same seed, same estimate.
  const GroupLayout l = Layout(16, "replica:2");
  EXPECT_EQ(MonteCarloRecoveryProbability(l, 3, 1000, 7)->successes,
            MonteCarloRecoveryProbability(l, 3, 1000, 7)->successes);
  EXPECT_FALSE(MonteCarloRecoveryProbability(l, 3, 0, 7).ok());
}

TEST(RecoveryProbabilityTest, WilsonInterval) {
  const MonteCarloEstimate e = WilsonInterval(50, 100);
  EXPECT_DOUBLE_EQ(e.estimate, 0.5);
  EXPECT_NEAR(e.ci_low, 0.4038, 1e-4);
  EXPECT_NEAR(e.ci_high, 0.5962, 1e-4);
  const MonteCarloEstimate all = WilsonInterval(100, 100);
  EXPECT_EQ(all.ci_high, 1.0);
  EXPECT_LT(all.ci_low, 1.0);
  // None served: the lower bound is 0 exactly, not rounding noise, for any count.
  for (uint64_t trials : {1u, 3u, 100u, 2000u, 1000003u}) {
    SCOPED_TRACE(trials);
    const MonteCarloEstimate none = WilsonInterval(0, trials);
    EXPECT_EQ(none.ci_low, 0.0);
    EXPECT_GT(none.ci_high, 0.0);
    EXPECT_EQ(WilsonInterval(trials, trials).ci_high, 1.0);
  }
}

TEST(RecoveryProbabilityTest, WholeRackLoss) {
  auto topo = *Topology::UniformWithRacks(16, 1, 4);
  // Rack-aware replica:2 pairs span two racks: any one rack lost is recoverable.
  const GroupLayout rep = *GroupLayout::Build(topo, *Scheme::Parse("replica:2"));
  EXPECT_EQ(*ExactRackLossProbability(rep, topo, 1), 1.0);
  // Two racks lost: each pair fails iff both its racks are lost.
  const double two = *ExactRackLossProbability(rep, topo, 2);
  EXPECT_GT(two, 0.0);
  EXPECT_LT(two, 1.0);
  auto mc = MonteCarloRackLossProbability(rep, topo, 2, 20000, 3, 3.2905);
  EXPECT_LE(mc->ci_low, two);
  EXPECT_GE(mc->ci_high, two);
  // xor:3 groups take one node per rack: one rack lost is fine, two are not.
  const GroupLayout x = *GroupLayout::Build(topo, *Scheme::Parse("xor:3"));
  EXPECT_EQ(*ExactRackLossProbability(x, topo, 1), 1.0);
  EXPECT_EQ(*ExactRackLossProbability(x, topo, 2), 0.0);
  // The same layout without rack awareness (consecutive pairs inside a rack) loses data.
  const GroupLayout blind = Layout(16, "replica:2");
  EXPECT_EQ(*ExactRackLossProbability(blind, topo, 1), 0.0);
  EXPECT_FALSE(ExactRackLossProbability(rep, *Topology::Uniform(16), 1).ok());
  EXPECT_FALSE(ExactRackLossProbability(rep, topo, 5).ok());
}

}  // namespace
}  // namespace memento::placement
