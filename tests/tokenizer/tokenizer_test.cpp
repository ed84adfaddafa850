// Encode/decode behaviour on small vocabularies built here (the corpus-wide comparison with
// Hugging Face `tokenizers` is tests/parity/test_tokenizer_parity.py).
#include <gtest/gtest.h>

#include "ridge/core/error.h"
#include "tokenizer/tokenizer_test_util.h"

namespace ridge::tokenizer {
namespace {

using test::byte_char;
using test::TempDir;

const std::string G = byte_char(' ');  // "Ġ"

std::vector<std::pair<std::string, std::string>> english_merges() {
  return {{"t", "h"},      {G, "th"},    {G + "th", "e"},   {"th", "e"}, {"l", "l"},
          {"e", "ll"},     {"h", "ell"}, {"hell", "o"},     {G, "w"},    {"o", "r"},
          {G + "w", "or"}, {"l", "d"},   {G + "wor", "ld"}, {G, G}};
}

TEST(Tokenizer, ByteLevelEncodeDecode) {
  TempDir dir;
  const Tokenizer tok = test::load_json(dir, test::byte_level_json(english_merges()));
  EXPECT_EQ(tok.kind(), VocabKind::byte_level_bpe);
  const auto ids = tok.encode("hello world the");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(tok.token_text(ids[0]), "hello");
  EXPECT_EQ(tok.token_text(ids[1]), G + "world");
  EXPECT_EQ(tok.token_text(ids[2]), G + "the");
  EXPECT_EQ(tok.decode(ids), "hello world the");
  EXPECT_EQ(tok.token_bytes(ids[1]), " world");
  EXPECT_EQ(tok.token_id(G + "the"), ids[2]);
  EXPECT_FALSE(tok.token_id("not a token").has_value());

  // Every byte round-trips, UTF-8 or not in its pieces.
  const std::string text = "caf\xC3\xA9 \xF0\x9F\x98\x80 \xE4\xB8\xAD\t\n";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(Tokenizer, SpecialTokensParseAndSkip) {
  TempDir dir;
  const Tokenizer tok = test::load_json(dir, test::byte_level_json(english_merges()));
  const TokenId im_end = *tok.token_id("<|im_end|>");
  EXPECT_TRUE(tok.is_special(im_end));
  EXPECT_FALSE(tok.is_special(0));

  const auto parsed = tok.encode("hello<|im_end|>the", true, true);
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[1], im_end);
  // parse_special = false: the text of a special token is ordinary text.
  const auto plain = tok.encode("hello<|im_end|>the", true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_end), 0);
  EXPECT_EQ(tok.decode(plain), "hello<|im_end|>the");

  EXPECT_EQ(tok.decode(parsed, false), "hello<|im_end|>the");
  EXPECT_EQ(tok.decode(parsed, true), "hellothe");
  // <|im_end|> and <|endoftext|> end generation.
  EXPECT_NE(std::find(tok.stop_ids().begin(), tok.stop_ids().end(), im_end), tok.stop_ids().end());
}

TEST(Tokenizer, OutOfRangeIdsAreDroppedByDecodeAndRefusedByAccessors) {
  TempDir dir;
  const Tokenizer tok = test::load_json(dir, test::byte_level_json(english_merges()));
  const std::vector<TokenId> ids = {*tok.token_id("hello"), -1, 1 << 30};
  EXPECT_EQ(tok.decode(ids), "hello");
  EXPECT_THROW(tok.token_text(-1), Error);
  EXPECT_THROW(tok.token_bytes(static_cast<TokenId>(tok.vocab_size())), Error);
  EXPECT_FALSE(tok.is_special(-5));
}

TEST(Tokenizer, InvalidUtf8InputIsReadAsReplacementCharacters) {
  TempDir dir;
  const Tokenizer tok = test::load_json(dir, test::byte_level_json(english_merges()));
  EXPECT_EQ(tok.decode(tok.encode("a\xFF"
                                  "b")),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(Tokenizer, SentencePieceStyle) {
  TempDir dir;
  const std::string sp = "\xE2\x96\x81";  // ▁
  const Tokenizer tok = test::load_json(
      dir, test::sentencepiece_json(
               {sp, "h", "e", "l", "o", "w", "r", "d"},
               {{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {sp, "hello"}, {sp, "w"}}));
  EXPECT_EQ(tok.kind(), VocabKind::sentencepiece_bpe);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.bos_id(), 1);

  const auto ids = tok.encode("hello world");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 1);  // <s>
  EXPECT_EQ(tok.token_text(ids[1]), sp + "hello");
  EXPECT_EQ(tok.decode(ids, true), "hello world");
  EXPECT_EQ(tok.decode(ids, false), "<s> hello world");
  EXPECT_EQ(tok.encode("hello", false).front(), *tok.token_id(sp + "hello"));

  // Characters outside the vocabulary fall back to their UTF-8 bytes.
  const auto cjk = tok.encode("\xE4\xB8\xAD", false);  // 中
  ASSERT_EQ(cjk.size(), 4u);                           // ▁ + three bytes
  EXPECT_EQ(tok.token_text(cjk[1]), "<0xE4>");
  EXPECT_EQ(tok.token_bytes(cjk[1]), "\xE4");
  EXPECT_EQ(tok.decode(cjk), "\xE4\xB8\xAD");
  // A byte run that is not UTF-8 becomes one U+FFFD per byte.
  EXPECT_EQ(tok.decode(std::vector<TokenId>{cjk[1], cjk[2]}), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Tokenizer, ConfigBesideTokenizerJson) {
  TempDir dir;
  dir.write("tokenizer.json", test::byte_level_json(english_merges()).dump());
  dir.write(
      "tokenizer_config.json",
      R"({"bos_token": "<|endoftext|>", "eos_token": {"content": "<|im_end|>"}, "add_bos_token": true})");
  dir.write("chat_template.jinja", "{{ messages }}");
  const Tokenizer tok = Tokenizer::from_hf(dir.path().string());
  EXPECT_EQ(tok.bos_id(), tok.token_id("<|endoftext|>"));
  EXPECT_EQ(tok.eos_id(), tok.token_id("<|im_end|>"));
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.encode("hello").front(), *tok.bos_id());
  EXPECT_EQ(tok.stop_ids().front(), *tok.eos_id());
  EXPECT_EQ(tok.chat_template(), "{{ messages }}");
}

TEST(Tokenizer, LongInputsStayFast) {
  // Not a timing assertion: a 1 MB single word must simply finish (the BPE is O(n log n)).
  TempDir dir;
  const Tokenizer tok = test::load_json(dir, test::byte_level_json(english_merges()));
  const std::string text(1 << 20, 'l');
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size() / 2);
  EXPECT_EQ(tok.decode(ids), text);
}

}  // namespace
}  // namespace ridge::tokenizer
