// Decompressed byte chunks from a gzip or plain JSON source, optionally
// inflated on a helper thread. Internal to the importer.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <streambuf>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

// Where compressed (or plain) bytes come from.
class RawInput {
 public:
  virtual ~RawInput() = default;
  // Reads up to `capacity` bytes; returns the count, 0 at end. Sets `error` on failure.
  virtual std::size_t read(char* destination, std::size_t capacity, std::string& error) = 0;
  // Total size in bytes when known before reading (a regular file, a
  // buffer), else -1.
  virtual std::int64_t size_hint() const { return -1; }
  // Copies `count` bytes at `offset` without consuming anything; false when
  // the input cannot do that (or is shorter). Used to look at the gzip
  // header and trailer before deciding how to read.
  virtual bool peek(std::uint64_t /*offset*/, char* /*destination*/, std::size_t /*count*/) { return false; }
  // All the bytes, when they are in memory already (not consumed by read()).
  virtual std::string_view in_memory() const { return {}; }
};

class FileInput final : public RawInput {
 public:
  explicit FileInput(std::FILE* file) : file_(file) {}
  ~FileInput() override;
  FileInput(const FileInput&) = delete;
  FileInput& operator=(const FileInput&) = delete;
  std::size_t read(char* destination, std::size_t capacity, std::string& error) override;
  std::int64_t size_hint() const override;
  bool peek(std::uint64_t offset, char* destination, std::size_t count) override;

 private:
  std::FILE* file_;
};

class MemoryInput final : public RawInput {
 public:
  explicit MemoryInput(std::string_view bytes) : bytes_(bytes) {}
  std::size_t read(char* destination, std::size_t capacity, std::string& error) override;
  std::int64_t size_hint() const override { return static_cast<std::int64_t>(bytes_.size()); }
  bool peek(std::uint64_t offset, char* destination, std::size_t count) override;
  std::string_view in_memory() const override { return bytes_; }

 private:
  std::string_view bytes_;
};

// A whole JSON document in memory (inflated when it was gzip), followed by
// kPadding readable bytes so that 16-byte vector loads may run past its end.
class WholeDocument {
 public:
  static constexpr std::size_t kPadding = 64;

  const char* begin() const { return data_.get(); }
  const char* end() const { return data_.get() + size_; }
  std::size_t size() const { return size_; }
  std::uint64_t compressed_bytes() const { return compressed_bytes_; }  // bytes read from the input
  bool gzip() const { return gzip_; }

 private:
  friend class WholeDocumentLoader;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  struct Free {
    Free() noexcept : alignment(64) {}
    explicit Free(std::size_t a) noexcept : alignment(a) {}
    std::size_t alignment;  // what allocate() passed to operator new
    void operator()(char* p) const noexcept;
  };
  // Allocates size + kPadding bytes; only the padding is initialised (the
  // document is written over the rest).
  void allocate(std::size_t size);

  std::unique_ptr<char, Free> data_;
  std::size_t storage_bytes_ = 0;  // what allocate() asked operator new for
  std::size_t size_ = 0;
  std::uint64_t compressed_bytes_ = 0;
  bool gzip_ = false;
};

// Bytes read from an input, in one buffer that was not zero-filled first.
struct InputBytes {
  std::unique_ptr<char[]> data;
  std::size_t size = 0;
  std::string_view view() const { return {data.get(), size}; }
};

// Reads a small trace in one piece instead of streaming it: a plain file, or
// a gzip whose trailer (ISIZE) announces at most `limit` bytes of JSON, which
// is then inflated in one call with libdeflate (2-3x faster than zlib's
// streaming inflate) when the build has it. Larger inputs, gzip without
// libdeflate, pipes and anything libdeflate does not take whole
// (concatenated members, damage) are left to the streaming Decoder, which
// handles and words every case.
class WholeDocumentLoader {
 public:
  enum class Outcome : std::uint8_t {
    loaded,    // `document` holds the JSON
    streamed,  // not attempted; the input was not touched
    fallback,  // the input was read into memory but not inflated whole: stream from fallback_input()
    failed,    // reading the input failed part way (the streaming path words the error)
  };

  // True when this build inflates gzip in one piece (libdeflate).
  static bool inflates_gzip();

  // before_fill, when set, learns the document's size once it is known and
  // before the input is read or inflated into it (the importer starts its
  // worker thread there).
  Outcome load(RawInput& input, std::size_t limit, WholeDocument& document,
               const std::function<void(std::size_t)>& before_fill = {});
  // After Outcome::fallback: the input's bytes, as a new input to stream from.
  std::unique_ptr<RawInput> fallback_input() const { return std::make_unique<MemoryInput>(compressed_view_); }

 private:
  InputBytes compressed_;             // the input's bytes when they had to be read
  std::string_view compressed_view_;  // those, or the caller's buffer
};

// Turns RawInput into decompressed chunks. gzip is recognised by its magic
// bytes (1f 8b); anything else passes through untouched. Concatenated gzip
// members (what `cat a.gz b.gz` makes) are read as one stream.
class Decoder {
 public:
  static constexpr std::size_t kChunkBytes = 256 * 1024;

  explicit Decoder(std::unique_ptr<RawInput> input);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Fills `out` (resized to what was produced). False at end of data or on
  // error; then error() says which.
  bool next(std::vector<char>& out);
  const std::string& error() const { return error_; }
  // At most `bytes` of output (ImportOptions::max_json_bytes): past them,
  // next() fails with `why` as the error and over_limit() is true.
  void limit_output(std::uint64_t bytes, std::string why) {
    output_limit_ = bytes;
    limit_error_ = std::move(why);
  }
  bool over_limit() const { return over_limit_; }
  bool gzip() const { return gzip_; }
  std::uint64_t compressed_bytes() const { return compressed_bytes_; }

 private:
  bool fill_input();
  bool next_chunk(std::vector<char>& out);
  bool next_gzip(std::vector<char>& out);

  std::unique_ptr<RawInput> input_;
  std::vector<char> in_buffer_;
  std::size_t in_begin_ = 0, in_end_ = 0;
  bool input_done_ = false;
  bool started_ = false;
  bool gzip_ = false;
  bool finished_ = false;
  bool member_open_ = false;
  std::string error_;
  std::uint64_t compressed_bytes_ = 0;
  std::uint64_t produced_bytes_ = 0;
  std::uint64_t output_limit_ = ~std::uint64_t{0};
  std::string limit_error_;
  bool over_limit_ = false;
  struct ZState;
  std::unique_ptr<ZState> z_;
};

// Runs a Decoder on a helper thread, handing chunks through a small bounded
// queue (so memory stays at a few chunks however large the file is).
class PipelinedDecoder {
 public:
  explicit PipelinedDecoder(Decoder& decoder);
  ~PipelinedDecoder();  // stops and joins the helper
  PipelinedDecoder(const PipelinedDecoder&) = delete;
  PipelinedDecoder& operator=(const PipelinedDecoder&) = delete;

  // Swaps the next chunk into `out` (the old buffer is recycled). False at end.
  bool next(std::vector<char>& out);
  bool start_failed() const { return start_failed_; }

 private:
  void run();
  static constexpr std::size_t kQueueDepth = 4;
  Decoder& decoder_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::vector<char>> ready_;
  std::vector<std::vector<char>> spare_;
  bool producer_done_ = false;
  bool stop_ = false;
  bool start_failed_ = false;
  std::thread thread_;
};

// std::streambuf over decompressed chunks, so nlohmann's stream input adapter
// can pull bytes one at a time from memory without copying. Tracks the byte
// offset for error messages.
class ChunkStreambuf final : public std::streambuf {
 public:
  ChunkStreambuf(Decoder& decoder, PipelinedDecoder* pipeline) : decoder_(decoder), pipeline_(pipeline) {}
  std::uint64_t position() const { return consumed_before_ + static_cast<std::uint64_t>(gptr() - eback()); }

 protected:
  int_type underflow() override;

 private:
  Decoder& decoder_;
  PipelinedDecoder* pipeline_;
  std::vector<char> chunk_;
  std::uint64_t consumed_before_ = 0;
};

// A contiguous, padded view of the decompressed stream for the fast scanner.
// refill() moves the unconsumed tail [cursor, end) to the front of one buffer
// and appends the next chunk behind it, so a token that straddles two chunks
// is contiguous once the scanner asks for more. At least kPadding readable
// bytes follow end() (16-byte vector loads may run past the data). Memory:
// one buffer of about a chunk plus the longest tail a caller keeps.
//
// A window over a WholeDocument is the whole stream at once: refill() only
// says that there is nothing more.
class ChunkWindow {
 public:
  static constexpr std::size_t kPadding = WholeDocument::kPadding;

  ChunkWindow(Decoder& decoder, PipelinedDecoder* pipeline);
  explicit ChunkWindow(const WholeDocument& document);
  ChunkWindow(const ChunkWindow&) = delete;
  ChunkWindow& operator=(const ChunkWindow&) = delete;

  const char* begin() const { return begin_; }
  const char* end() const { return end_; }
  // True for a window over a WholeDocument: its bytes never move.
  bool whole_document() const { return decoder_ == nullptr; }
  // Keeps [cursor, end()), appends the next non-empty chunk and points cursor
  // at the kept bytes' new place. False at end of data (or when the decoder
  // failed; its error() says so); the kept bytes stay readable either way.
  bool refill(const char*& cursor);
  // Byte offset of p in the whole uncompressed stream.
  std::uint64_t offset_of(const char* p) const { return discarded_ + static_cast<std::uint64_t>(p - begin_); }

 private:
  Decoder* decoder_ = nullptr;  // null: a whole document
  PipelinedDecoder* pipeline_ = nullptr;
  std::vector<char> chunk_;
  std::unique_ptr<char[]> data_;
  std::size_t capacity_ = 0;  // bytes in data_, padding excluded
  const char* begin_ = nullptr;
  const char* end_ = nullptr;
  std::uint64_t discarded_ = 0;  // stream bytes before begin_
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
