// The Unicode pieces under the pre-tokenizers: NFC, the \s rewrite for PCRE2, added-token
// matching with lstrip/rstrip.
#include <gtest/gtest.h>

#include "ridge/core/error.h"
#include "ridge/tokenizer/added_vocab.h"
#include "ridge/tokenizer/nfc.h"
#include "ridge/tokenizer/regex.h"

namespace ridge::tokenizer::detail {
namespace {

TEST(Nfc, ComposesReordersAndKeepsExclusions) {
  EXPECT_EQ(to_nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(to_nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + U+0301 -> é
  EXPECT_EQ(to_nfc("\xE2\x84\xAB"), "\xC3\x85");                              // Angstrom sign -> Å
  EXPECT_EQ(to_nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul L V T
  EXPECT_EQ(to_nfc("\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");              // LV + T
  EXPECT_EQ(to_nfc("a\xCC\x81\xCC\xA8"), "\xC4\x85\xCC\x81");     // reordered, then composed
  EXPECT_EQ(to_nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // U+0958 is excluded
  EXPECT_EQ(to_nfc("\xEF\xAC\x81"), "\xEF\xAC\x81");              // ﬁ is compatibility only
  EXPECT_EQ(to_nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");    // canonical order
}

TEST(Regex, WhitespaceIsUnicodeWhiteSpace) {
  const std::string rewritten = rewrite_whitespace_classes(R"(\s+(?!\S)| ?[^\s\p{L}]+)");
  EXPECT_EQ(rewritten.find("\\s"), std::string::npos) << rewritten;
  EXPECT_EQ(rewritten.find("\\S"), std::string::npos) << rewritten;

  const Regex ws(R"(\s+)", "test");
  std::vector<std::pair<size_t, size_t>> m;
  ws.find_all(
      "a \xE3\x80\x80"
      "b",
      m);  // U+3000 is White_Space
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{1, 5}));
  m.clear();
  ws.find_all(
      "a\xE1\xA0\x8E"
      "b",
      m);  // U+180E is not (PCRE2's own \s says it is)
  EXPECT_TRUE(m.empty());
  m.clear();
  const Regex cls(R"([^\s\p{L}]+)", "test");
  cls.find_all("ab \xE1\xA0\x8E!", m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{3, 7}));
  EXPECT_THROW(Regex("(", "test"), ridge::Error);
}

TEST(Regex, LongRunsDoNotExhaustTheStack) {
  const Regex gpt2(R"(\s+(?!\S)|\s+)", "test");
  const std::string spaces(1 << 20, ' ');
  std::vector<std::pair<size_t, size_t>> m;
  gpt2.find_all(spaces + "x", m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].second, spaces.size() - 1);
}

TEST(AddedTokens, LeftmostLongestWithStrip) {
  AddedTokenMatcher matcher;
  std::vector<AddedToken> tokens = {
      {10, "<a>", true, false, false, false},
      {11, "<a><b>", true, false, false, false},
      {12, "<m>", false, true, true, false},  // lstrip + rstrip
  };
  matcher.build(tokens, {"<a>", "<a><b>", "<m>"});
  std::vector<AddedSplit> out;
  matcher.split("x<a><b>y<a>", false, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[1].token, 1);  // the longer token wins at the same start
  EXPECT_EQ(out[3].token, 0);

  out.clear();
  matcher.split("x  <m>\t y", false, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].end, 1u);  // the spaces before <m> belong to it
  EXPECT_EQ(out[1].token, 2);
  EXPECT_EQ(out[1].begin, 1u);
  EXPECT_EQ(out[1].end, 8u);  // and so do the ones after
  EXPECT_EQ(out[2].begin, 8u);

  out.clear();
  matcher.split("<a><b>", true, out);  // specials skipped: all text
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token, -1);
}

}  // namespace
}  // namespace ridge::tokenizer::detail
