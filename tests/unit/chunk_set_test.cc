// The set of verified chunks a fetching daemon relays: its bitmap and its log,
// which neighbours watch instead of polling.
#include "kinds/weights/files/chunk_set.h"

#include <gtest/gtest.h>

#include <thread>

namespace seedd {
namespace {

using std::chrono::milliseconds;

TEST(ChunkSet, TheLogListsEachChunkOnceInTheOrderItWasVerified) {
  ChunkSet set(10);
  set.Set(7);
  set.Set(2);
  set.Set(7);   // again: nothing new
  set.Set(10);  // no such chunk
  uint64_t next = 0;
  EXPECT_EQ(set.Since(0, milliseconds(0), &next), (std::vector<uint32_t>{7, 2}));
  EXPECT_EQ(next, 2u);
  EXPECT_TRUE(set.Since(2, milliseconds(0), &next).empty());
  EXPECT_EQ(next, 2u);
}

TEST(ChunkSet, TheBitmapsCursorCoversEveryChunkInIt) {
  ChunkSet set(9);
  set.Set(0);
  set.Set(8);
  uint64_t cursor = 0;
  const std::string bits = set.Bitmap(&cursor);
  EXPECT_EQ(bits, std::string("\x80\x80", 2));
  EXPECT_EQ(cursor, 2u);
  set.Set(3);
  uint64_t next = 0;
  EXPECT_EQ(set.Since(cursor, milliseconds(0), &next), std::vector<uint32_t>{3});
}

// A watch waits for the next chunk instead of answering empty at once.
TEST(ChunkSet, SinceWaitsForTheNextChunk) {
  ChunkSet set(4);
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(50));
    set.Set(1);
  });
  uint64_t next = 0;
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint32_t> got = set.Since(0, milliseconds(10000), &next);
  const auto took = std::chrono::steady_clock::now() - start;
  later.join();
  EXPECT_EQ(got, std::vector<uint32_t>{1});
  EXPECT_LT(took, milliseconds(5000));
  // With nothing new it answers empty once the wait is over.
  EXPECT_TRUE(set.Since(next, milliseconds(20), &next).empty());
}

// A cursor from another daemon (past this log's end) starts over.
TEST(ChunkSet, ACursorPastTheEndStartsOver) {
  ChunkSet set(4);
  set.Set(3);
  uint64_t next = 0;
  EXPECT_EQ(set.Since(99, milliseconds(0), &next), std::vector<uint32_t>{3});
  EXPECT_EQ(next, 1u);
}

// A watcher that says which chunks it lacks is answered with those alone, and
// not before one of them is verified: a relay's watchers are not woken, nor
// answered, for chunks they have already.
TEST(ChunkSet, AWaiterWithAWantedBitmapIsAnsweredOnlyForChunksItWants) {
  ChunkSet set(10);
  const std::string wanted("\x10\x40", 2);  // chunks 3 and 9
  ASSERT_TRUE(set.FitsBitmap(wanted));
  set.Set(1);
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(20));
    set.Set(2);
    std::this_thread::sleep_for(milliseconds(200));
    set.Set(9);
  });
  uint64_t next = 0;
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint32_t> got = set.Since(0, milliseconds(10000), &next, wanted);
  const auto took = std::chrono::steady_clock::now() - start;
  later.join();
  EXPECT_EQ(got, std::vector<uint32_t>{9});
  EXPECT_EQ(next, 3u);                 // past the chunks passed over
  EXPECT_GE(took, milliseconds(200));  // not woken for chunk 2
  // Nothing wanted since: empty once the wait is over, the cursor past chunk 4.
  set.Set(4);
  EXPECT_TRUE(set.Since(next, milliseconds(20), &next, wanted).empty());
  EXPECT_EQ(next, 4u);
  // A bitmap of the wrong size is no filter.
  EXPECT_FALSE(set.FitsBitmap(std::string(3, '\0')));
  EXPECT_EQ(set.Since(0, milliseconds(0), &next, std::string(3, '\0')),
            (std::vector<uint32_t>{1, 2, 9, 4}));
}

}  // namespace
}  // namespace seedd
