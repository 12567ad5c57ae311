#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/node_identity.h"
#include "persist/remote_files.h"

namespace memento::runtime {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> Bytes(uint64_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Per-rank test data: entries "w" (odd size, with tensor metadata), "empty", "b".
struct RankData {
  std::vector<uint8_t> w, b;
  std::vector<RemoteEntrySource> Sources() const {
    return {{"w", w.data(), w.size(), {"float32", {8, 1000}, {2, 1000}, {2, 0}}},
            {"empty", nullptr, 0, {}},
            {"b", b.data(), b.size(), {"uint8", {}, {}, {}}}};
  }
};

RankData MakeRank(uint64_t version, int rank) {
  return {Bytes(8001, static_cast<uint32_t>(version * 10 + rank)),
          Bytes(333, static_cast<uint32_t>(version * 10 + rank + 5))};
}

class DirectoryRemoteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/memento-remote-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes every rank file and the manifest of `version`.
  void Persist(DirectoryRemoteStore& store, uint64_t version, int world) {
    std::vector<RankFileInfo> infos;
    for (int r = 0; r < world; ++r) {
      RankData d = MakeRank(version, r);
      auto info = store.WriteRankFile(version, r, d.Sources());
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      infos.push_back(*info);
    }
    ASSERT_TRUE(store.WriteManifest(version, world, infos).ok());
  }

  std::string root_;
};

// The finished mark: written atomically, read back, refused when damaged,
// removed only for the run it names, and never pruned with the versions.
TEST_F(DirectoryRemoteStoreTest, FinishedMark) {
  DirectoryRemoteStore store(root_, "job1");
  auto none = store.ReadFinished();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  Persist(store, 1, 2);
  Persist(store, 2, 2);
  ASSERT_TRUE(store.WriteFinished({0xabcdef, 2, 77}).ok());
  ASSERT_TRUE(store.Prune(1).ok());
  auto mark = store.ReadFinished();
  ASSERT_TRUE(mark.ok() && mark->has_value()) << mark.status().ToString();
  EXPECT_EQ((*mark)->lineage, 0xabcdefu);
  EXPECT_EQ((*mark)->version, 2u);
  EXPECT_EQ((*mark)->unix_ns, 77u);
  ASSERT_TRUE(store.ClearFinished(0x1).ok());
  EXPECT_TRUE(store.ReadFinished()->has_value()) << "another run's clear leaves it";
  {
    std::fstream f(store.FinishedPath(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('X');
  }
  auto damaged = store.ReadFinished();
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorruption) << damaged.status().ToString();
  EXPECT_NE(damaged.status().message().find("FINISHED"), std::string::npos);
  ASSERT_TRUE(store.WriteFinished({0xabcdef, 2, 77}).ok());
  ASSERT_TRUE(store.ClearFinished(0xabcdef).ok());
  EXPECT_FALSE(fs::exists(store.FinishedPath()));
  DirectoryRemoteStore other(root_, "job2");
  ASSERT_TRUE(other.WriteFinished({5, 1, 0}).ok());
  fs::copy_file(other.FinishedPath(), store.FinishedPath());
  EXPECT_EQ(store.ReadFinished().status().code(), StatusCode::kCorruption)
      << "another job's mark is refused";
}

TEST_F(DirectoryRemoteStoreTest, RoundTrip) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 100, 3);
  auto complete = store.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_EQ(*complete, std::vector<uint64_t>{100});
  EXPECT_EQ(**store.NewestComplete(), 100u);
  auto m = store.ReadManifest(100);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->world_size, 3);
  EXPECT_EQ(m->job, "job1");

  for (int r = 0; r < 3; ++r) {
    RankData expect = MakeRank(100, r);
    auto entries = store.ListEntries(100, r);
    ASSERT_TRUE(entries.ok()) << entries.status().ToString();
    ASSERT_EQ(entries->size(), 3u);
    EXPECT_EQ((*entries)[0].name, "w");
    EXPECT_EQ((*entries)[0].bytes, 8001u);
    EXPECT_EQ((*entries)[0].layout, (EntryLayout{"float32", {8, 1000}, {2, 1000}, {2, 0}}));
    std::vector<uint8_t> w(8001), b(333);
    ASSERT_TRUE(
        store
            .ReadRankFile(
                100, r,
                {{"w", w.data(), w.size()}, {"b", b.data(), b.size()}, {"empty", nullptr, 0}})
            .ok());
    EXPECT_EQ(w, expect.w);
    EXPECT_EQ(b, expect.b);
  }
  // A subset of targets is fine; unknown names and wrong sizes are not.
  std::vector<uint8_t> b(333);
  EXPECT_TRUE(store.ReadRankFile(100, 1, {{"b", b.data(), b.size()}}).ok());
  EXPECT_EQ(store.ReadRankFile(100, 1, {{"nope", b.data(), b.size()}}).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store.ReadRankFile(100, 1, {{"b", b.data(), 332}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.ReadRankFile(100, 3, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.ReadRankFile(99, 0, {}).code(), StatusCode::kNotFound);
}

// An entry read through a sink comes in order, a few MiB at a time, never
// whole; a payload damaged in the file fails the read with Corruption naming
// the entry; a target with neither buffer nor sink is refused.
TEST_F(DirectoryRemoteStoreTest, AnEntryStreamsThroughASinkPieceByPiece) {
  DirectoryRemoteStore store(root_, "job1");
  const std::vector<uint8_t> big = Bytes((9ull << 20) + 3, 7);
  auto info = store.WriteRankFile(5, 0, {{"big", big.data(), big.size(), {"uint8", {}, {}, {}}}});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_TRUE(store.WriteManifest(5, 1, {*info}).ok());
  std::vector<uint8_t> got;
  uint64_t largest = 0;
  bool in_order = true;
  RemoteEntryTarget target{"big", nullptr, big.size()};
  target.sink = [&](uint64_t at, const uint8_t* bytes, uint64_t len) {
    in_order = in_order && at == got.size();
    largest = std::max(largest, len);
    got.insert(got.end(), bytes, bytes + len);
  };
  ASSERT_TRUE(store.ReadRankFile(5, 0, {target}).ok());
  EXPECT_TRUE(in_order);
  EXPECT_EQ(got, big);
  EXPECT_GT(largest, 0u);
  EXPECT_LE(largest, 4ull << 20) << "handed over whole, not piece by piece";

  EXPECT_EQ(store.ReadRankFile(5, 0, {{"big", nullptr, big.size()}}).code(),
            StatusCode::kInvalidArgument);

  {  // one byte in the middle of the payload
    std::fstream f(store.RankFilePath(5, 0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(store.RankFilePath(5, 0)) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(fs::file_size(store.RankFilePath(5, 0)) / 2));
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  got.clear();
  Status damaged = store.ReadRankFile(5, 0, {target});
  EXPECT_EQ(damaged.code(), StatusCode::kCorruption) << damaged.ToString();
  EXPECT_NE(damaged.message().find("'big'"), std::string::npos) << damaged.ToString();
}

TEST_F(DirectoryRemoteStoreTest, NothingVisibleUntilTheManifest) {
  DirectoryRemoteStore store(root_, "job1");
  RankData d0 = MakeRank(7, 0);
  auto r0 = store.WriteRankFile(7, 0, d0.Sources());
  ASSERT_TRUE(r0.ok());
  EXPECT_TRUE(store.ListComplete()->empty());
  EXPECT_FALSE(store.NewestComplete()->has_value());
  // The manifest refuses to name a rank file that is not there.
  RankFileInfo missing{1, "rank-000001.mck", 10, 0};
  Status s = store.WriteManifest(7, 2, {*r0, missing});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(store.ManifestPath(7)));
  EXPECT_EQ(store.WriteManifest(7, 2, {*r0}).code(), StatusCode::kInvalidArgument);
  // No temporary files are left behind by successful writes.
  for (const auto& e : fs::directory_iterator(store.VersionDir(7))) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST_F(DirectoryRemoteStoreTest, KilledWriterLeavesNoPartialVersion) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 1, 1);
  std::vector<uint8_t> big(48 << 20, 0x5A);
  for (int round = 0; round < 3; ++round) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (uint64_t v = 2;; ++v) {
        auto info = store.WriteRankFile(v, 0, {{"big", big.data(), big.size(), {}}});
        if (!info.ok() || !store.WriteManifest(v, 1, {*info}).ok()) _exit(1);
      }
    }
    usleep(20000 + 30000 * round);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    // Every visible version reads back whole; temporaries are invisible.
    auto complete = store.ListComplete();
    ASSERT_TRUE(complete.ok());
    ASSERT_FALSE(complete->empty());
    for (uint64_t v : *complete) {
      auto entries = store.ListEntries(v, 0);
      ASSERT_TRUE(entries.ok()) << "version " << v << ": " << entries.status().ToString();
      if (v == 1) continue;
      std::vector<uint8_t> back(big.size());
      ASSERT_TRUE(store.ReadRankFile(v, 0, {{"big", back.data(), back.size()}}).ok());
      EXPECT_EQ(back, big);
    }
    // The dead writer's temporary file goes away with Prune; complete versions stay.
    ASSERT_TRUE(store.Prune(100).ok());
    for (const auto& dir : fs::directory_iterator(store.job_dir())) {
      for (const auto& e : fs::directory_iterator(dir.path())) {
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
      }
    }
    EXPECT_EQ(*store.ListComplete(), *complete);
  }
}

TEST_F(DirectoryRemoteStoreTest, LiveWritersTemporaryIsKept) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 1, 1);
  fs::create_directories(store.VersionDir(2));
  const std::string mine = store.RankFilePath(2, 0) + ".tmp." + remote_files::WriterId() +
                           "." + std::to_string(getpid()) + ".77";
  std::ofstream(mine) << "partial";
  // A dead pid on this host: a child that has exited.
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  const std::string dead = store.RankFilePath(2, 1) + ".tmp." + remote_files::WriterId() + "." +
                           std::to_string(child) + ".0";
  std::ofstream(dead) << "partial";
  // The same host name and pid from another PID namespace (a container on the host's
  // network, or a writer of before the namespace was named): its pid means nothing here.
  const std::string other_namespace = store.RankFilePath(2, 3) + ".tmp." + HostName() +
                                      "@4026599999-0badf00d." + std::to_string(child) + ".0";
  const std::string unnamed_namespace =
      store.RankFilePath(2, 4) + ".tmp." + HostName() + "." + std::to_string(child) + ".0";
  std::ofstream(other_namespace) << "partial";
  std::ofstream(unnamed_namespace) << "partial";
  const std::string remote_host = store.RankFilePath(2, 2) + ".tmp.other.host.example.1.0";
  std::ofstream(remote_host) << "partial";
  ASSERT_TRUE(store.Prune(1).ok());
  EXPECT_TRUE(fs::exists(mine));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(remote_host));  // cannot tell; not old yet
  EXPECT_TRUE(fs::exists(other_namespace));
  EXPECT_TRUE(fs::exists(unnamed_namespace));
  DirectoryRemoteStore::Options quick;
  quick.stale_temp_seconds = -1;  // everything counts as old
  DirectoryRemoteStore impatient(root_, "job1", quick);
  ASSERT_TRUE(impatient.Prune(1).ok());
  EXPECT_FALSE(fs::exists(remote_host));
  EXPECT_FALSE(fs::exists(other_namespace));
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{1});
}

// A run that reuses the job id with lower step numbers keeps its own
// versions: prune goes by completion time, not by number.
TEST_F(DirectoryRemoteStoreTest, PruneKeepsTheNewestRunNotTheHighestNumbers) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 10, 1);
  Persist(store, 11, 1);
  ASSERT_TRUE(store.Prune(2).ok());
  for (uint64_t v : {1, 2, 3}) {  // a fresh run under the same id
    usleep(20000);                // distinct manifest times on coarse file systems
    Persist(store, v, 1);
    ASSERT_TRUE(store.Prune(2).ok());
  }
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{2, 3}));
}

// Prune keeps what a restore would pick: the newest run's newest versions.
// The times of manifests are the writing clients' clocks; here the older
// versions' read 10 minutes ahead of the one just published (a client whose
// clock lags), which a prune by manifest time removed at once. A newer run
// with lower numbers still keeps its own versions.
TEST_F(DirectoryRemoteStoreTest, PruneKeepsTheVersionJustPublishedWhateverTheClocks) {
  DirectoryRemoteStore store(root_, "job1");
  auto publish = [&](uint64_t version, uint64_t lineage) {
    RankData d = MakeRank(version, 0);
    auto info = store.WriteRankFile(version, 0, d.Sources(), lineage);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ASSERT_TRUE(store.WriteManifest(version, 1, {*info}, lineage).ok());
  };
  auto ahead = [&](uint64_t version) {
    timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec += 600;
    times[1] = times[0];
    ASSERT_EQ(utimensat(AT_FDCWD, store.ManifestPath(version).c_str(), times, 0), 0);
  };
  publish(4, 7);
  publish(6, 7);
  ahead(4);
  ahead(6);
  publish(8, 7);
  ASSERT_TRUE(store.Prune(2).ok());
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{6, 8}));
  publish(1, 9);  // a newer run under the same id
  ASSERT_TRUE(store.Prune(2).ok());
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{1, 8}));
}

// A version without a manifest may still be being written: prune leaves it,
// whatever its number, until it has been idle for stale_temp_seconds.
TEST_F(DirectoryRemoteStoreTest, PruneNeverRemovesAVersionBeingWritten) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 10, 1);
  Persist(store, 11, 1);
  std::vector<uint8_t> w = Bytes(64, 3);
  auto info = store.WriteRankFile(1, 0, {{"w", w.data(), w.size(), {}}});  // rank 1 still writing
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(store.Prune(1).ok());
  EXPECT_TRUE(fs::exists(store.RankFilePath(1, 0)));
  ASSERT_TRUE(store.WriteManifest(1, 1, {*info}).ok());
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{1, 11}));
}

// The manifest records the lineage (run) that wrote the version; one written
// without (as before lineages existed) reads back as lineage 0, and a bad
// lineage line hides the version like any corrupt manifest.
TEST_F(DirectoryRemoteStoreTest, ManifestRecordsTheLineage) {
  DirectoryRemoteStore store(root_, "job1");
  std::vector<uint8_t> w = Bytes(64, 3);
  for (uint64_t v : {1, 2}) {
    auto info = store.WriteRankFile(v, 0, {{"w", w.data(), w.size(), {}}});
    ASSERT_TRUE(info.ok());
    Status written = v == 1 ? store.WriteManifest(v, 1, {*info}, 0xF123456789ABCDEFull)
                            : store.WriteManifest(v, 1, {*info});
    ASSERT_TRUE(written.ok()) << written.ToString();
  }
  auto with = store.ReadManifest(1);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->lineage, 0xF123456789ABCDEFull);
  auto without = store.ReadManifest(2);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_EQ(without->lineage, 0u);
  std::ifstream in(store.ManifestPath(2));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("lineage"), std::string::npos) << text;
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{1, 2}));
}

// A failed rank-file write leaves no empty version folder behind.
TEST_F(DirectoryRemoteStoreTest, FailedWriteLeavesNoEmptyVersionFolder) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 1, 1);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {1024, 1024};  // writes past 1 KiB fail with EFBIG
    if (setrlimit(RLIMIT_FSIZE, &small) != 0) _exit(3);
    std::vector<uint8_t> big(64 << 10, 1);
    auto info = store.WriteRankFile(2, 0, {{"big", big.data(), big.size(), {}}});
    _exit(!info.ok() && info.status().code() == StatusCode::kIoError ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "the write did not fail";
  EXPECT_FALSE(fs::exists(store.VersionDir(2)));
  EXPECT_TRUE(fs::exists(store.VersionDir(1)));
}

// Open() refuses a root that persists could not use, naming it and the reason,
// and resolves a relative root once.
TEST_F(DirectoryRemoteStoreTest, OpenRefusesUnusableRoots) {
  const std::string file = root_ + "/a-file";
  std::ofstream(file) << "x";
  for (const std::string& bad :
       {file, std::string("/dev/null"), std::string("/proc/self"), root_ + "/no/parent"}) {
    auto s = DirectoryRemoteStore::Open(bad, "job1");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("'" + bad + "'"), std::string::npos)
        << s.status().ToString();
  }
  const fs::path before = fs::current_path();
  fs::current_path(root_);
  auto rel = DirectoryRemoteStore::Open("rel", "job1");
  fs::current_path(before);
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  EXPECT_EQ((*rel)->job_dir(), root_ + "/rel/job1");
  EXPECT_TRUE(fs::is_directory(root_ + "/rel"));
  EXPECT_FALSE(DirectoryRemoteStore::Open(root_, "bad/job").ok());
}

TEST_F(DirectoryRemoteStoreTest, EveryByteOfARankFileIsChecked) {
  DirectoryRemoteStore store(root_, "job1");
  std::vector<uint8_t> w = Bytes(40, 1);
  auto info = store.WriteRankFile(5, 0, {{"w", w.data(), w.size(), {"float32", {10}, {10}, {0}}}});
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(store.WriteManifest(5, 1, {*info}).ok());
  const std::string path = store.RankFilePath(5, 0);
  const uint64_t size = fs::file_size(path);
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  for (uint64_t off = 0; off < size; ++off) {
    uint8_t byte;
    ASSERT_EQ(pread(fd, &byte, 1, off), 1);
    uint8_t flipped = byte ^ 0x10;
    ASSERT_EQ(pwrite(fd, &flipped, 1, off), 1);
    std::vector<uint8_t> back(40);
    Status s = store.ReadRankFile(5, 0, {{"w", back.data(), back.size()}});
    EXPECT_FALSE(s.ok()) << "byte " << off << " of " << size;
    ASSERT_EQ(pwrite(fd, &byte, 1, off), 1);
  }
  close(fd);
  std::vector<uint8_t> back(40);
  ASSERT_TRUE(store.ReadRankFile(5, 0, {{"w", back.data(), back.size()}}).ok());
  EXPECT_EQ(back, w);
}

TEST_F(DirectoryRemoteStoreTest, CorruptPayloadIsNamedAndTruncationHidesTheVersion) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 3, 2);
  const std::string path = store.RankFilePath(3, 1);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);  // inside the payload of "w"
    char c;
    f.seekg(200);
    f.get(c);
    f.seekp(200);
    f.put(static_cast<char>(c ^ 1));
  }
  std::vector<uint8_t> w(8001);
  Status s = store.ReadRankFile(3, 1, {{"w", w.data(), w.size()}});
  ASSERT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("entry 'w'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("rank-000001"), std::string::npos) << s.ToString();
  EXPECT_TRUE(store.ReadRankFile(3, 0, {{"w", w.data(), w.size()}}).ok());

  fs::resize_file(path, fs::file_size(path) - 1);
  EXPECT_TRUE(store.ListComplete()->empty());
}

TEST_F(DirectoryRemoteStoreTest, CorruptManifestHidesTheVersion) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 3, 1);
  const std::string m = store.ManifestPath(3);
  std::string text;
  {
    std::ifstream in(m);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (size_t i = 0; i < text.size(); ++i) {
    std::string bad = text;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    std::ofstream(m, std::ios::trunc) << bad;
    EXPECT_TRUE(store.ListComplete()->empty()) << "manifest byte " << i;
  }
  std::ofstream(m, std::ios::trunc) << text;
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{3});
}

// A FIFO under a manifest's or the finished mark's name (anyone who can
// write the folder may make one) is refused, not waited on for a writer.
TEST_F(DirectoryRemoteStoreTest, AFifoUnderAManifestOrTheFinishedMarkIsRefusedNotWaitedOn) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 3, 1);
  Persist(store, 4, 1);
  ASSERT_EQ(unlink(store.ManifestPath(4).c_str()), 0);
  ASSERT_EQ(mkfifo(store.ManifestPath(4).c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{3});
  EXPECT_EQ(store.ReadManifest(4).status().code(), StatusCode::kCorruption);
  ASSERT_EQ(mkfifo(store.FinishedPath().c_str(), 0600), 0) << std::strerror(errno);
  auto mark = store.ReadFinished();
  EXPECT_EQ(mark.status().code(), StatusCode::kCorruption) << mark.status().ToString();
  EXPECT_NE(mark.status().message().find("not a regular file"), std::string::npos);
}

TEST_F(DirectoryRemoteStoreTest, PruneKeepsNewestN) {
  DirectoryRemoteStore store(root_, "job1");
  for (uint64_t v : {10, 20, 30, 40}) Persist(store, v, 2);
  // 25 and 50: incomplete versions, which may still be being written (by
  // this run or by another run under the same job id): kept until idle for
  // stale_temp_seconds.
  RankData d = MakeRank(25, 0);
  ASSERT_TRUE(store.WriteRankFile(25, 0, d.Sources()).ok());
  ASSERT_TRUE(store.WriteRankFile(50, 0, d.Sources()).ok());
  ASSERT_TRUE(store.Prune(2).ok());
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{30, 40}));
  EXPECT_FALSE(fs::exists(store.VersionDir(10)));
  EXPECT_FALSE(fs::exists(store.VersionDir(20)));
  EXPECT_TRUE(fs::exists(store.RankFilePath(25, 0)));
  EXPECT_TRUE(fs::exists(store.RankFilePath(50, 0)));
  DirectoryRemoteStore::Options quick;
  quick.stale_temp_seconds = -1;  // everything counts as idle
  ASSERT_TRUE(DirectoryRemoteStore(root_, "job1", quick).Prune(2).ok());
  EXPECT_FALSE(fs::exists(store.VersionDir(25)));
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{30, 40}));
  ASSERT_TRUE(store.Prune(1).ok());
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{40});
  EXPECT_EQ(store.Prune(0).code(), StatusCode::kInvalidArgument);
}

// A run that reuses the job id and a version number another run has
// complete (lineage A) writes its rank files beside A's, not over them: A's
// version stays complete and reads back intact while B writes, and after B
// dies before its manifest; B's manifest then replaces A's at once. A's
// files, no longer named, go with a later Prune once idle.
TEST_F(DirectoryRemoteStoreTest, ARunReusingAVersionNumberNeverOverwritesTheOtherRunsFiles) {
  DirectoryRemoteStore store(root_, "job1");
  constexpr uint64_t kA = 0xAAAA, kB = 0xBBBB;
  const int world = 2;
  auto write = [&](uint64_t lineage, uint32_t seed, int ranks) {
    std::vector<RankFileInfo> infos;
    for (int r = 0; r < ranks; ++r) {
      std::vector<uint8_t> w = Bytes(5000, seed + r);
      auto info = store.WriteRankFile(5, r, {{"w", w.data(), w.size(), {}}}, lineage);
      EXPECT_TRUE(info.ok()) << info.status().ToString();
      infos.push_back(*info);
    }
    return infos;
  };
  auto read = [&](int r) {
    std::vector<uint8_t> got(5000);
    Status s = store.ReadRankFile(5, r, {{"w", got.data(), got.size()}});
    EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s.ToString();
    return got;
  };
  ASSERT_TRUE(store.WriteManifest(5, world, write(kA, 100, world), kA).ok());
  write(kB, 200, 1);  // run B writes rank 0's file of v5, then dies
  ASSERT_EQ(*store.ListComplete(), std::vector<uint64_t>{5});
  EXPECT_EQ(store.ReadManifest(5)->lineage, kA);
  for (int r = 0; r < world; ++r) EXPECT_EQ(read(r), Bytes(5000, 100 + r)) << "rank " << r;

  ASSERT_TRUE(store.WriteManifest(5, world, write(kB, 200, world), kB).ok());
  EXPECT_EQ(store.ReadManifest(5)->lineage, kB);
  for (int r = 0; r < world; ++r) EXPECT_EQ(read(r), Bytes(5000, 200 + r)) << "rank " << r;
  EXPECT_NE(*store.RankFileOf(5, 0), store.RankFilePath(5, 0, kA));
  ASSERT_TRUE(fs::exists(store.RankFilePath(5, 0, kA)));
  ASSERT_TRUE(store.Prune(1).ok());
  EXPECT_TRUE(fs::exists(store.RankFilePath(5, 0, kA))) << "not idle yet";
  DirectoryRemoteStore::Options quick;
  quick.stale_temp_seconds = -1;  // everything counts as idle
  ASSERT_TRUE(DirectoryRemoteStore(root_, "job1", quick).Prune(1).ok());
  EXPECT_FALSE(fs::exists(store.RankFilePath(5, 0, kA)));
  EXPECT_FALSE(fs::exists(store.RankFilePath(5, 1, kA)));
  for (int r = 0; r < world; ++r) EXPECT_EQ(read(r), Bytes(5000, 200 + r)) << "rank " << r;
}

// Bytes this process has read through read(2) and its kin so far (rchar of
// /proc/self/io).
uint64_t BytesReadByThisProcess() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  ADD_FAILURE() << "no rchar in /proc/self/io";
  return 0;
}

// ListEntries reads each entry's record, not its payload: 16 MiB of entries
// cost well under 1 MiB of reads.
TEST_F(DirectoryRemoteStoreTest, ListingTheEntriesReadsNoPayload) {
  DirectoryRemoteStore store(root_, "job1");
  std::vector<uint8_t> big(8 << 20, 7), other(8 << 20, 9);
  auto info = store.WriteRankFile(
      4, 0, {{"big", big.data(), big.size(), {}}, {"other", other.data(), other.size(), {}}});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_TRUE(store.WriteManifest(4, 1, {*info}).ok());
  const uint64_t before = BytesReadByThisProcess();
  auto entries = store.ListEntries(4, 0);
  const uint64_t read = BytesReadByThisProcess() - before;
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "big");
  EXPECT_EQ((*entries)[1].bytes, other.size());
  EXPECT_LT(read, 1u << 20) << "ListEntries read the payloads";
}

// Pruning run A's complete v5 takes A's files of v5 and its manifest, not
// run B's rank file of v5 nor a temporary it is writing there now (B reuses
// the job id and persists v5 at that moment); they go once idle.
TEST_F(DirectoryRemoteStoreTest, PruningAVersionLeavesAnotherRunsFilesBeingWritten) {
  DirectoryRemoteStore store(root_, "job1");
  constexpr uint64_t kA = 0xAAAA, kB = 0xBBBB;
  auto write = [&](uint64_t version, uint64_t lineage, int r) {
    std::vector<uint8_t> w = Bytes(5000, static_cast<uint32_t>(version + r));
    auto info = store.WriteRankFile(version, r, {{"w", w.data(), w.size(), {}}}, lineage);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return *info;
  };
  ASSERT_TRUE(store.WriteManifest(5, 2, {write(5, kA, 0), write(5, kA, 1)}, kA).ok());
  ASSERT_TRUE(store.WriteManifest(6, 2, {write(6, kA, 0), write(6, kA, 1)}, kA).ok());
  write(5, kB, 0);  // run B, writing v5 now
  const std::string temp = store.VersionDir(5) + "/rank-000001.000000000000bbbb.mck.tmp.12345";
  std::ofstream(temp) << "being written";
  ASSERT_TRUE(store.Prune(1).ok());
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{6});
  EXPECT_FALSE(fs::exists(store.RankFilePath(5, 0, kA)));
  EXPECT_FALSE(fs::exists(store.RankFilePath(5, 1, kA)));
  EXPECT_TRUE(fs::exists(store.RankFilePath(5, 0, kB))) << "pruned run B's rank file";
  EXPECT_TRUE(fs::exists(temp)) << "pruned run B's temporary";
  DirectoryRemoteStore::Options quick;
  quick.stale_temp_seconds = -1;  // everything counts as idle
  ASSERT_TRUE(DirectoryRemoteStore(root_, "job1", quick).Prune(1).ok());
  EXPECT_FALSE(fs::exists(store.VersionDir(5)));
}

// The same run persists v5 again (its restore passed over v5 and it trained
// to it again): from the first rank file replaced until the new manifest, v5
// is not visible, never "complete" with files that fail its crcs; then it is
// the new one.
TEST_F(DirectoryRemoteStoreTest, PersistingAVersionAgainWithdrawsItsManifestUntilTheNewOne) {
  DirectoryRemoteStore store(root_, "job1");
  constexpr uint64_t kLineage = 0xCCCC;
  auto write = [&](int r, uint32_t seed) {
    std::vector<uint8_t> w = Bytes(5000, seed + r);
    auto info = store.WriteRankFile(5, r, {{"w", w.data(), w.size(), {}}}, kLineage);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return *info;
  };
  ASSERT_TRUE(store.WriteManifest(5, 2, {write(0, 100), write(1, 100)}, kLineage).ok());
  ASSERT_EQ(*store.ListComplete(), std::vector<uint64_t>{5});
  const RankFileInfo again0 = write(0, 300);
  EXPECT_TRUE(store.ListComplete()->empty()) << "v5 listed complete with a replaced rank file";
  const RankFileInfo again1 = write(1, 300);
  ASSERT_TRUE(store.WriteManifest(5, 2, {again0, again1}, kLineage).ok());
  ASSERT_EQ(*store.ListComplete(), std::vector<uint64_t>{5});
  for (int r = 0; r < 2; ++r) {
    std::vector<uint8_t> got(5000);
    Status s = store.ReadRankFile(5, r, {{"w", got.data(), got.size()}});
    ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.ToString();
    EXPECT_EQ(got, Bytes(5000, 300 + r)) << "rank " << r;
  }
}

// A version whose manifest is there but does not validate (here: a format
// this build does not read, as a newer memento writes; the same path a read
// error takes) may be a committed version: Prune never removes it, however
// old, and the newer complete versions are kept as before.
TEST_F(DirectoryRemoteStoreTest, PruneNeverRemovesAVersionWithAManifestItCannotRead) {
  DirectoryRemoteStore store(root_, "job1");
  for (uint64_t v : {1, 2, 3}) Persist(store, v, 1);
  {
    std::ifstream in(store.ManifestPath(1));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("memento-manifest 1");
    ASSERT_NE(at, std::string::npos) << text;
    text[at + std::strlen("memento-manifest ")] = '9';
    std::ofstream(store.ManifestPath(1), std::ios::trunc) << text;
  }
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{2, 3}));
  DirectoryRemoteStore::Options quick;
  quick.stale_temp_seconds = -1;  // everything counts as idle
  ASSERT_TRUE(DirectoryRemoteStore(root_, "job1", quick).Prune(1).ok());
  EXPECT_TRUE(fs::exists(store.ManifestPath(1)));
  EXPECT_TRUE(fs::exists(store.RankFilePath(1, 0)));
  EXPECT_FALSE(fs::exists(store.VersionDir(2)));
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{3});
}

// One version folder that cannot be emptied (here a folder inside it, idle,
// which unlink refuses) does not stop Prune: the versions after it are
// pruned, and the error names what could not be removed.
TEST_F(DirectoryRemoteStoreTest, PruneGoesOnPastAVersionItCannotRemove) {
  DirectoryRemoteStore store(root_, "job1");
  for (uint64_t v : {1, 2, 3}) Persist(store, v, 1);
  fs::create_directories(store.VersionDir(1) + "/not-ours");
  DirectoryRemoteStore::Options quick;
  quick.stale_temp_seconds = -1;  // everything counts as idle
  Status s = DirectoryRemoteStore(root_, "job1", quick).Prune(1);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("not-ours"), std::string::npos) << s.ToString();
  EXPECT_FALSE(fs::exists(store.VersionDir(2)));
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{3});
  EXPECT_TRUE(fs::exists(store.VersionDir(1) + "/not-ours"));
}

// Manifest fields a crc-valid manifest can still get wrong are refused by
// name, never thrown on: a crc field that is not hex (with the manifest's own
// crc line recomputed over it), and a version folder name past 2^64 - 1 that
// would wrap onto another version's number.
TEST_F(DirectoryRemoteStoreTest, AManifestWithANonHexCrcAndAnOverflowingFolderAreRefused) {
  DirectoryRemoteStore store(root_, "job1");
  Persist(store, 100, 1);
  Persist(store, 7, 1);
  fs::create_directories(root_ + "/job1/v18446744073709551716");  // 2^64 + 100
  EXPECT_EQ(*store.ListComplete(), (std::vector<uint64_t>{7, 100}));

  std::ifstream in(store.ManifestPath(7));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t crc_line = text.rfind("crc ");
  ASSERT_NE(crc_line, std::string::npos);
  std::string body = text.substr(0, crc_line);
  const size_t rank_line = body.find("rank 0 ");
  ASSERT_NE(rank_line, std::string::npos) << body;
  const size_t field = body.find_last_of(' ', body.size() - 2) + 1;  // the rank line's crc
  ASSERT_GT(field, rank_line);
  body.replace(field, 8, "zzzzzzzz");
  char crc[16];
  std::snprintf(crc, sizeof(crc), "%08x", erasure::Crc32c(body.data(), body.size()));
  std::ofstream(store.ManifestPath(7), std::ios::trunc) << body << "crc " << crc << "\n";
  auto m = store.ReadManifest(7);
  EXPECT_EQ(m.status().code(), StatusCode::kCorruption) << m.status().ToString();
  EXPECT_NE(m.status().message().find("rank line 0"), std::string::npos) << m.status().ToString();
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{100});
}

TEST_F(DirectoryRemoteStoreTest, TwoJobsShareARootApart) {
  DirectoryRemoteStore a(root_, "jobA");
  DirectoryRemoteStore b(root_, "jobB");
  Persist(a, 1, 1);
  Persist(b, 2, 1);
  EXPECT_EQ(*a.ListComplete(), std::vector<uint64_t>{1});
  EXPECT_EQ(*b.ListComplete(), std::vector<uint64_t>{2});
  ASSERT_TRUE(a.Prune(1).ok());
  EXPECT_EQ(*b.ListComplete(), std::vector<uint64_t>{2});
}

}  // namespace
}  // namespace memento::runtime
