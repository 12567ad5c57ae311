// Elastic restores refused (run under both harnesses, as elastic_restore_test.cc):
// new slices that do not tile a tensor, another dtype or global shape, an
// entry the relaunch does not register, opaque bytes onto another rank count,
// a relaunch onto another topology without MEMENTO_ELASTIC. Each is refused
// by name, and the old stores stay for a correct relaunch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "elastic_job.h"
#include "harness/spawn.h"
#include "memento/runtime/checkpointer.h"

namespace memento::runtime {
namespace {

using namespace elastic_job;  // NOLINT(build/namespaces): the shared job
using testing::RankContext;
using testing::Spawn;

// A restore refused as bad input, its message naming each of `says`.
void ExpectRefusedNaming(const Result<RestoreReport>& report,
                         const std::vector<std::string>& says) {
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument) << report.status().ToString();
  for (const std::string& s : says) {
    EXPECT_NE(report.status().message().find(s), std::string::npos)
        << "no '" << s << "' in: " << report.status().ToString();
  }
}

// New slices that do not tile the tensor: a clear error naming the entry,
// and the old stores stay for a correct relaunch.
TEST(Elastic, BadSlicesFailClearlyAndACorrectRelaunchStillRestores) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "replica:2", 1, 2, false); });
  Lose({3});
  const Topo three{3, 1, {0, 1, 2}};
  Spawn(3, [&](RankContext& ctx) {
    Rank r = Open(ctx, three, "replica:2", true, false, /*bad_rows=*/true);
    if (!r.ck) return;
    ExpectRefusedNaming(r.ck->Restore(), {"'rows'"});
  });
  Spawn(3, [&](RankContext& ctx) { RestoreElastic(ctx, three, "replica:2", {2, false}, false); });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// A dtype or global shape other than the checkpoint's: refused naming the
// entry and what differs, and a correct relaunch still restores.
TEST(Elastic, OtherDtypeOrGlobalShapeFailsByNameAndACorrectRelaunchStillRestores) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "replica:2", 1, 2, false); });
  const Topo three{3, 1, {0, 1, 2}};
  struct Wrong {
    EntryLayout layout;
    const char* says;
  };
  const std::vector<Wrong> wrongs = {
      {{"float64", {kRows, kRowCols}, {16, kRowCols}, {0, 0}}, "dtype float64"},
      {{"float32", {kRows, kRowCols + 1}, {16, kRowCols + 1}, {0, 0}}, "[48,21]"}};
  for (const Wrong& w : wrongs) {
    Spawn(3, [&](RankContext& ctx) {
      auto ck = Checkpointer::Create(MakeConfig(three, ctx.rank(), "replica:2", true, false),
                                     ctx.transport());
      ASSERT_TRUE(ck.ok());
      EntryLayout layout = w.layout;
      layout.offsets[0] = 16 * ctx.rank();
      const size_t elem = layout.dtype == "float64" ? 8 : 4;
      std::vector<uint8_t> buf(16 * layout.shape[1] * elem);
      ASSERT_TRUE((*ck)->RegisterBuffer("rows", buf.data(), buf.size(), layout).ok());
      ExpectRefusedNaming((*ck)->Restore(), {"'rows'", w.says, "differ from the checkpoint's"});
    });
  }
  Spawn(3, [&](RankContext& ctx) { RestoreElastic(ctx, three, "replica:2", {2, false}, false); });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// A relaunch that registers less than the checkpoint holds: refused naming
// what it lacks (the old stores go once the new topology commits, so what it
// does not take would be gone), and a correct relaunch still restores.
TEST(Elastic, AnEntryTheRelaunchDoesNotRegisterIsRefusedNotDropped) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "replica:2", 1, 2, false); });
  const Topo three{3, 1, {0, 1, 2}};
  Spawn(3, [&](RankContext& ctx) {
    auto ck = Checkpointer::Create(MakeConfig(three, ctx.rank(), "replica:2", true, false),
                                   ctx.transport());
    ASSERT_TRUE(ck.ok());
    const auto [r0, r1] = Split(kRows, ctx.size(), ctx.rank());
    std::vector<float> rows((r1 - r0) * kRowCols);
    ASSERT_TRUE((*ck)
                    ->RegisterBuffer("rows", rows.data(), rows.size() * 4,
                                     {"float32", {kRows, kRowCols}, {r1 - r0, kRowCols}, {r0, 0}})
                    .ok());
    ExpectRefusedNaming((*ck)->Restore(),
                        {"'bias' is in the checkpoint but not registered: an elastic restore "
                         "would drop it"});
  });
  Spawn(3, [&](RankContext& ctx) { RestoreElastic(ctx, three, "replica:2", {2, false}, false); });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// An entry without a tensor layout (opaque bytes) has no slicing to follow:
// refused onto another rank count, naming it.
TEST(Elastic, OpaqueEntryOntoAnotherRankCountIsRefusedByName) {
  auto open = [](RankContext& ctx, const Topo& t, bool elastic, std::vector<uint8_t>* blob) {
    auto ck = Checkpointer::Create(MakeConfig(t, ctx.rank(), "replica:2", elastic, false),
                                   ctx.transport());
    EXPECT_TRUE(ck.ok());
    blob->assign(64, static_cast<uint8_t>(ctx.rank()));
    EXPECT_TRUE((*ck)->RegisterBuffer("optimizer.blob", blob->data(), blob->size()).ok());
    return std::move(ck).value();
  };
  Spawn(4, [&](RankContext& ctx) {
    std::vector<uint8_t> blob;
    auto ck = open(ctx, Topo{4, 1, {}}, false, &blob);
    ASSERT_TRUE(ck->Save(1).ok());
    ASSERT_TRUE(ck->Wait().ok());
  });
  Spawn(3, [&](RankContext& ctx) {
    std::vector<uint8_t> blob;
    auto ck = open(ctx, Topo{3, 1, {0, 1, 2}}, true, &blob);
    ExpectRefusedNaming(ck->Restore(), {"'optimizer.blob'"});
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

TEST(Elastic, WithoutOptInTheRelaunchIsRefusedAndNothingIsLost) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "replica:2", 1, 2, false); });
  const Topo three{3, 1, {0, 1, 2}};
  Spawn(3, [&](RankContext& ctx) {
    Rank r = Open(ctx, three, "replica:2", /*elastic=*/false, false);
    if (!r.ck) return;
    auto report = r.ck->Restore();
    ASSERT_FALSE(report.ok());
    EXPECT_EQ(report.status().code(), StatusCode::kElasticRestoreNeeded);
    EXPECT_NE(report.status().message().find("MEMENTO_ELASTIC=1"), std::string::npos)
        << report.status().ToString();
  });
  Spawn(3, [&](RankContext& ctx) { RestoreElastic(ctx, three, "replica:2", {2, false}, false); });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

}  // namespace
}  // namespace memento::runtime
