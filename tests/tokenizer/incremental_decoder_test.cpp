// IncrementalDecoder: over random id streams, the pieces concatenate to decode() exactly and
// each piece is whole UTF-8, also when byte tokens split characters across pushes.
#include <random>

#include <gtest/gtest.h>

#include "ridge/tokenizer/utf8.h"
#include "tokenizer/tokenizer_test_util.h"

namespace ridge::tokenizer {
namespace {

using test::TempDir;

// Streams `ids` and checks the invariants; returns the streamed text.
std::string stream(const Tokenizer& tok, const std::vector<TokenId>& ids, bool skip_special) {
  IncrementalDecoder decoder(tok, skip_special);
  std::string text;
  for (TokenId id : ids) {
    const std::string piece = decoder.push(id);
    EXPECT_TRUE(detail::is_valid_utf8(piece)) << "piece is not whole UTF-8";
    text += piece;
  }
  EXPECT_EQ(decoder.ids(), ids);
  EXPECT_EQ(decoder.emitted_bytes(), text.size());
  const std::string tail = decoder.flush();
  EXPECT_TRUE(detail::is_valid_utf8(tail));
  return text + tail;
}

void random_streams(const Tokenizer& tok, const std::vector<TokenId>& favoured, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> any(0, static_cast<TokenId>(tok.vocab_size()) - 1);
  std::uniform_int_distribution<size_t> pick(0, favoured.size() - 1);
  std::uniform_int_distribution<int> length(1, 48);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (int round = 0; round < 400; ++round) {
    std::vector<TokenId> ids;
    const int n = length(rng);
    for (int i = 0; i < n; ++i) ids.push_back(coin(rng) < 0.6 ? favoured[pick(rng)] : any(rng));
    for (bool skip : {false, true}) {
      ASSERT_EQ(stream(tok, ids, skip), tok.decode(ids, skip)) << "round " << round;
    }
  }
}

TEST(IncrementalDecoder, ByteFallbackRunsSplittingCharacters) {
  TempDir dir;
  const std::string sp = "\xE2\x96\x81";
  const Tokenizer tok = test::load_json(
      dir, test::sentencepiece_json({sp, "a", "b", "\xC3\xA9", sp + "a"}, {{"a", "b"}}));
  // Byte tokens of multibyte characters (€ = E2 82 AC, 😀 = F0 9F 98 80), stray continuation
  // bytes, ASCII bytes, and ordinary pieces.
  std::vector<TokenId> favoured;
  for (const char* t :
       {"<0xE2>", "<0x82>", "<0xAC>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0x41>", "<0xC3>",
        "<0xA9>", "<0xFF>", "\xE2\x96\x81", "a", "ab", "<s>", "</s>"}) {
    favoured.push_back(*tok.token_id(t));
  }
  random_streams(tok, favoured, 1);

  // A character split over pushes appears whole, at the push that completes its run.
  IncrementalDecoder decoder(tok, true);
  EXPECT_EQ(decoder.push(*tok.token_id("<0xE2>")), "");
  EXPECT_EQ(decoder.push(*tok.token_id("<0x82>")), "");
  EXPECT_EQ(decoder.push(*tok.token_id("<0xAC>")), "");
  EXPECT_EQ(decoder.push(*tok.token_id("a")),
            "\xE2\x82\xAC"
            "a");
  EXPECT_EQ(decoder.flush(), "");
}

TEST(IncrementalDecoder, ByteLevelPiecesSplittingCharacters) {
  TempDir dir;
  const Tokenizer tok = test::load_json(dir, test::byte_level_json({{test::byte_char(' '), "a"}}));
  std::vector<TokenId> favoured;
  for (int b : {0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80, 0xC3, 0xA9, 0xFF, int{'a'}, int{' '}}) {
    favoured.push_back(*tok.token_id(test::byte_char(static_cast<uint8_t>(b))));
  }
  favoured.push_back(*tok.token_id("<|im_end|>"));
  random_streams(tok, favoured, 2);

  IncrementalDecoder decoder(tok, false);
  EXPECT_EQ(decoder.push(*tok.token_id(test::byte_char(0xF0))), "");
  EXPECT_EQ(decoder.push(*tok.token_id(test::byte_char(0x9F))), "");
  EXPECT_EQ(decoder.push(*tok.token_id(test::byte_char(0x98))), "");
  EXPECT_EQ(decoder.push(*tok.token_id(test::byte_char(0x80))), "\xF0\x9F\x98\x80");
  EXPECT_EQ(decoder.push(*tok.token_id(test::byte_char(0xE2))), "");
  EXPECT_EQ(decoder.flush(), "\xEF\xBF\xBD");  // an unfinished character at the end
}

}  // namespace
}  // namespace ridge::tokenizer
