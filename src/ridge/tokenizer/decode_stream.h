// Decoding as a stream: token texts go in one at a time, text comes out as soon as it is final.
// The steps are those of the `tokenizers` crate's decoders (ByteLevel, Replace, ByteFallback,
// Fuse, Strip, Metaspace), each rewritten to hold back exactly what a later token could still
// change: ByteLevel holds the bytes of an incomplete UTF-8 character, ByteFallback holds a run of
// <0xNN> tokens until the run ends (an invalid run becomes one U+FFFD per byte, so even its
// valid-looking start is not final), Strip holds nothing once its leading characters are decided.
// decode() is this stream run to the end, so a streamed text always equals the batch decode.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::tokenizer::detail {

struct DecoderStep {
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace };
  Kind kind = Kind::fuse;
  std::string pattern;  // replace: literal searched for; metaspace: the replacement character
  std::string content;  // replace: replacement; strip: the character stripped
  size_t strip_start = 0;
  size_t strip_stop = 0;
  bool metaspace_prepend = true;  // metaspace: prepend_scheme is not "never"
  // Set by validate_decoder(): the step sees chunks of one fused text, not separate tokens.
  bool after_fuse = false;
};

// Checks that the steps can stream exactly (throws ridge::Error naming the step otherwise) and
// marks each step's position relative to the first Fuse/ByteLevel.
void validate_decoder(std::vector<DecoderStep>& steps, std::string_view field);

class DecodeStream {
 public:
  explicit DecodeStream(const std::vector<DecoderStep>* steps);
  // Feeds one token's text (as the decoder of `tokenizers` receives it); final text is appended
  // to `out`.
  void push(std::string_view token, std::string& out);
  // Ends the stream: whatever was held is appended to `out`. The stream can then be reused.
  void finish(std::string& out);

 private:
  struct State {
    std::string held;     // byte_level: incomplete UTF-8; byte_fallback: the pending byte run
    size_t index = 0;     // metaspace: items seen
    size_t stripped = 0;  // strip (after fuse): leading characters removed so far
    bool strip_done = false;
  };
  void feed(size_t step, std::string item, std::string& out);
  void end(size_t step, std::string& out);
  // ByteFallback: the pending run of byte tokens ends here.
  void flush_byte_run(size_t step, std::string& out);

  const std::vector<DecoderStep>* steps_;
  std::vector<State> state_;
};

}  // namespace ridge::tokenizer::detail
