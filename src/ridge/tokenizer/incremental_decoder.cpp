#include "ridge/tokenizer/decode_stream.h"
#include "ridge/tokenizer/tokenizer.h"
#include "ridge/tokenizer/tokenizer_impl.h"

namespace ridge::tokenizer {

struct IncrementalDecoder::Stream {
  explicit Stream(const std::vector<detail::DecoderStep>* steps) : decode(steps) {}
  detail::DecodeStream decode;
};

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer),
      skip_special_(skip_special),
      stream_(std::make_unique<Stream>(&tokenizer.impl_->decoder)) {}

IncrementalDecoder::~IncrementalDecoder() = default;
IncrementalDecoder::IncrementalDecoder(IncrementalDecoder&&) noexcept = default;
IncrementalDecoder& IncrementalDecoder::operator=(IncrementalDecoder&&) noexcept = default;

std::string IncrementalDecoder::push(TokenId id) {
  ids_.push_back(id);
  std::string out;
  if (const std::string* text = tokenizer_->impl_->decoder_input(id, skip_special_)) {
    stream_->decode.push(*text, out);
  }
  emitted_bytes_ += out.size();
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out;
  stream_->decode.finish(out);
  ids_.clear();
  emitted_bytes_ = 0;
  return out;
}

}  // namespace ridge::tokenizer
