#include <gtest/gtest.h>

#include <algorithm>

#include "seedd/json_text.h"
#include "support/test_util.h"
#include "wire/frame.h"

namespace seedd {
namespace {

TEST(EncodeFrame, WritesEightByteBigEndianLengthThenBody) {
  std::string frame = EncodeFrame(std::string(258, 'x'));
  ASSERT_EQ(frame.size(), 8u + 258u);
  EXPECT_EQ(frame.substr(0, 8), std::string("\0\0\0\0\0\0\x01\x02", 8));
  EXPECT_EQ(frame.substr(8), std::string(258, 'x'));
}

TEST(FrameReader, DecodesAFrameFedOneByteAtATime) {
  std::string frame = EncodeJsonFrame(Json{{"kind", "artifact"}});
  FrameReader reader(1024);
  for (char c : frame) {
    EXPECT_FALSE(reader.done());
    EXPECT_EQ(reader.Feed(std::string_view(&c, 1)), 1u);
  }
  ASSERT_TRUE(reader.done());
  EXPECT_EQ(reader.body(), R"({"kind":"artifact"})");
}

TEST(FrameReader, LeavesBytesAfterTheFrameUnconsumed) {
  std::string bytes = EncodeFrame("{}") + "trailing";
  FrameReader reader(1024);
  EXPECT_EQ(reader.Feed(bytes), 10u);
  EXPECT_TRUE(reader.done());
  EXPECT_EQ(reader.Feed("more"), 0u);
}

TEST(FrameReader, RejectsOneTebibyteHeaderWithoutAllocating) {
  FrameReader reader(64 * 1024);
  reader.Feed(testing::Header(1ull << 40));
  ASSERT_TRUE(reader.failed());
  EXPECT_EQ(reader.error().message(), "Message size 1099511627776 exceeds limit 65536");
  EXPECT_EQ(reader.body().capacity(), std::string().capacity());
}

TEST(FrameReader, AcceptsBodyExactlyAtTheLimit) {
  FrameReader reader(4);
  reader.Feed(EncodeFrame("1234"));
  EXPECT_TRUE(reader.done());
  FrameReader over(3);
  over.Feed(EncodeFrame("1234"));
  EXPECT_TRUE(over.failed());
  EXPECT_EQ(over.error().message(), "Message size 4 exceeds limit 3");
}

TEST(FrameReader, DescribesWhereTheStreamEnded) {
  FrameReader empty(100);
  EXPECT_FALSE(empty.started());
  EXPECT_EQ(empty.EndOfStreamError().message(), "connection closed before a message arrived");
  FrameReader header(100);
  header.Feed(std::string("\0\0\0", 3));
  EXPECT_EQ(header.EndOfStreamError().message(),
            "connection closed inside a message header (3 of 8 bytes)");
  FrameReader body(100);
  body.Feed(EncodeFrame("hello").substr(0, 10));
  EXPECT_EQ(body.EndOfStreamError().message(), "connection closed inside a message (2 of 5 bytes)");
}

TEST(ParseJson, ParsesObjectsAndRejectsGarbage) {
  auto ok = ParseJson(R"({"a": [1, 2]})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["a"][1], 2);
  auto bad = ParseJson("{not json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "not valid JSON");
  EXPECT_FALSE(ParseJson("").ok());
}

TEST(ParseJson, RejectsNestingBeyondTheLimitBeforeParsing) {
  std::string deep(kMaxJsonDepth + 1, '[');
  deep += std::string(kMaxJsonDepth + 1, ']');
  auto r = ParseJson(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "JSON nesting deeper than 128 levels");
  std::string ok(kMaxJsonDepth, '[');
  ok += std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJson(ok).ok());
  // Brackets inside strings do not count.
  EXPECT_TRUE(ParseJson("\"" + std::string(1000, '[') + "\"").ok());
}

TEST(DumpJson, WritesTheSameTextAsTheLibrarysCompactDump) {
  auto parsed =
      ParseJson(R"({"b":[1,-2,3.5,1e300,true,false,null,{}],"a":"plain","q":"say \"hi\"\n",)"
                R"("u":"caf\u00e9 \u2603","e":"","n":{"x":[[]]},"big":18446744073709551615,)"
                R"("i":[0,-1,9223372036854775807,-9223372036854775808,-0.0,0.1]})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(DumpJson(*parsed), parsed->dump());
  EXPECT_EQ(DumpJson(Json("ctl\x01")), Json("ctl\x01").dump());
  for (const Json& n : {Json(0), Json(-7), Json(uint64_t{42}), Json(INT64_MIN), Json(UINT64_MAX)}) {
    EXPECT_EQ(DumpJson(n), n.dump());
  }
  // Every byte value at every position of a word-sized scan.
  for (int c = 1; c < 256; ++c) {
    for (size_t pos = 0; pos < 17; ++pos) {
      std::string s(17, 'a');
      s[pos] = static_cast<char>(c);
      Json j = s;
      ASSERT_EQ(DumpJson(j), j.dump(-1, ' ', false, Json::error_handler_t::replace))
          << c << " " << pos;
    }
  }
}

// A large value's text in pieces (hashed as it is written, never held whole):
// the same text, piece after piece, each about 64 KiB.
TEST(DumpJson, ALargeValuesTextInPiecesIsTheSameText) {
  Json big = Json::array();
  for (int i = 0; i < 20000; ++i) {
    big.push_back({{"file", "d" + std::to_string(i % 50) + "/f" + std::to_string(i) + ".bin"},
                   {"offset", i * 4096},
                   {"length", 4096},
                   {"n", {-i, 0.5, nullptr, true, "caf\u00e9"}}});
  }
  const Json values[] = {big, Json::object({{"chunks", big}, {"x", 1}}), Json(7), Json::object()};
  for (const Json& v : values) {
    std::string joined;
    size_t pieces = 0, largest = 0;
    JsonTextInPieces(v, [&](std::string_view piece) {
      joined += piece;
      ++pieces;
      largest = std::max(largest, piece.size());
    });
    EXPECT_EQ(joined, DumpJson(v));
    if (joined.size() > 200000) {
      EXPECT_GT(pieces, 10u);
      EXPECT_LT(largest, 70000u);
    }
  }
}

TEST(DumpJson, ReplacesInvalidUtf8InsteadOfThrowing) {
  Json j = std::string("bad \xff byte");
  EXPECT_EQ(DumpJson(j), "\"bad \xEF\xBF\xBD byte\"");
}

}  // namespace
}  // namespace seedd
