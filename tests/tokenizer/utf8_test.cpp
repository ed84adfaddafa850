#include <gtest/gtest.h>

#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer::detail {
namespace {

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
  // A truncated sequence followed by ASCII: one U+FFFD for the truncated prefix.
  EXPECT_EQ(utf8_lossy("\xE2\x82"
                       "A"),
            "\xEF\xBF\xBD"
            "A");
  // Stray continuation bytes: one U+FFFD each.
  EXPECT_EQ(utf8_lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // E0 needs A0..BF next: E0 80 is two invalid subparts.
  EXPECT_EQ(utf8_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // Surrogates (ED A0..) are invalid.
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail("a"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);  // can never complete
}

TEST(Utf8, Whitespace) {
  EXPECT_TRUE(is_unicode_whitespace(U' '));
  EXPECT_TRUE(is_unicode_whitespace(U'\u3000'));
  EXPECT_TRUE(is_unicode_whitespace(U'\u0085'));
  EXPECT_FALSE(is_unicode_whitespace(U'\u180E'));
  EXPECT_FALSE(is_unicode_whitespace(U'\u200B'));
  EXPECT_FALSE(is_unicode_whitespace(U'\x1C'));
}

}  // namespace
}  // namespace ridge::tokenizer::detail
