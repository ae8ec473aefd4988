// Housekeeping of the model cache: the newest versions and `current` stay; older
// versions, unrecorded directories and abandoned pulls go; a running pull's
// staging and a name never installed are left alone.
#include <gtest/gtest.h>

#include <algorithm>

#include "kinds/weights/files/local_copy.h"
#include "kinds/weights/files/manifest.h"
#include "kinds/weights/files/staging.h"
#include "seedd/weights.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;

class HousekeepingTest : public ::testing::Test {
 protected:
  fs::path base() { return dir_.path() / "weights" / "m"; }
  // A committed version named `root` with its record, committed `age` hours ago.
  fs::path Version(const std::string& root, int age) {
    const fs::path dir = base() / root;
    testing::WriteRandom(dir / "w.bin", 4096, static_cast<unsigned>(age));
    Result<Manifest> m = BuildManifest("m", dir, BuildOptions{});
    EXPECT_OK(m);
    EXPECT_OK(RecordLocalCopy(dir, *m));
    fs::last_write_time(LocalRecordPath(dir),
                        fs::file_time_type::clock::now() - std::chrono::hours(age));
    return dir;
  }
  void Current(const std::string& root) {
    fs::remove(base() / "current");
    fs::create_directory_symlink(root, base() / "current");
  }
  bool Removed(const GcReport& r, const fs::path& p) {
    return std::find(r.removed.begin(), r.removed.end(), p) != r.removed.end();
  }
  testing::TempDir dir_;
};

TEST_F(HousekeepingTest, KeepsTheNewestVersionsAndCurrentAndRemovesTheRest) {
  const fs::path v1 = Version("r1", 40), v2 = Version("r2", 30), v3 = Version("r3", 20),
                 v4 = Version("r4", 10);
  Current("r1");  // rolled back to the oldest: it stays whatever its age
  Result<GcReport> r = CollectWeightsGarbage(dir_.path(), GcOptions{});
  ASSERT_OK(r);
  EXPECT_TRUE(fs::exists(v1) && fs::exists(LocalRecordPath(v1)));
  EXPECT_TRUE(fs::exists(v4) && fs::exists(LocalRecordPath(v4)));
  for (const fs::path& gone : {v2, v3}) {
    EXPECT_FALSE(fs::exists(gone)) << gone;
    EXPECT_FALSE(fs::exists(LocalRecordPath(gone))) << gone;
    EXPECT_TRUE(Removed(*r, gone));
  }
  EXPECT_EQ(r->removed.size(), 2u);
  EXPECT_GE(r->bytes, 2u * 4096);
  // Nothing is left of the removal itself.
  for (const auto& e : fs::directory_iterator(base())) {
    EXPECT_EQ(e.path().filename().string().rfind(".seedd-discard-", 0), std::string::npos);
  }
}

TEST_F(HousekeepingTest, AbandonedStagingGoesAndARunningPullsStagingStays) {
  Version("r1", 1);
  Current("r1");
  const fs::path abandoned = base() / ".r0.seedd-staging";
  testing::WriteRandom(abandoned / "w.bin", 4096, 9);
  Result<Manifest> m = BuildManifest("m", base() / "r1", BuildOptions{});
  ASSERT_OK(m);
  Staging running(*m, base() / ".r9.seedd-staging");
  ASSERT_OK(running.Open());
  const fs::path old_layout = base() / "0123456789abcdef";  // no record
  testing::WriteRandom(old_layout / "w.bin", 10, 1);
  ASSERT_OK(CollectWeightsGarbage(dir_.path(), GcOptions{}));
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_FALSE(fs::exists(old_layout));
  EXPECT_TRUE(fs::exists(base() / ".r9.seedd-staging"));
  EXPECT_TRUE(fs::exists(base() / "r1"));
}

TEST_F(HousekeepingTest, ANameNeverInstalledKeepsItsStagingForTheResume) {
  const fs::path staging = base() / ".r1.seedd-staging";
  testing::WriteRandom(staging / "w.bin", 4096, 9);
  Result<GcReport> r = CollectWeightsGarbage(dir_.path(), GcOptions{});
  ASSERT_OK(r);
  EXPECT_TRUE(r->removed.empty());
  EXPECT_TRUE(fs::exists(staging));
}

TEST_F(HousekeepingTest, ADryRunReportsAndRemovesNothing) {
  Version("r1", 3);
  Version("r2", 2);
  const fs::path v3 = Version("r3", 1);
  Current("r3");
  GcOptions options;
  options.keep_versions = 1;
  options.dry_run = true;
  Result<GcReport> r = CollectWeightsGarbage(dir_.path(), options);
  ASSERT_OK(r);
  EXPECT_EQ(r->removed.size(), 2u);
  EXPECT_TRUE(fs::exists(base() / "r1"));
  EXPECT_TRUE(fs::exists(base() / "r2"));
  options.dry_run = false;
  ASSERT_OK(CollectWeightsGarbage(dir_.path(), options));
  EXPECT_FALSE(fs::exists(base() / "r1"));
  EXPECT_FALSE(fs::exists(base() / "r2"));
  EXPECT_TRUE(fs::exists(v3));
}

}  // namespace
}  // namespace seedd
