#include "import/byte_source.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if STEPSCOPE_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

namespace stepscope {
inline namespace v1 {
namespace detail {

FileInput::~FileInput() {
  if (file_ != nullptr) std::fclose(file_);
}

std::size_t FileInput::read(char* destination, std::size_t capacity, std::string& error) {
  const std::size_t got = std::fread(destination, 1, capacity, file_);
  if (got < capacity && std::ferror(file_)) {
    error = std::string("read error: ") + std::strerror(errno);
  }
  return got;
}

std::int64_t FileInput::size_hint() const {
  struct stat info {};
  if (fstat(fileno(file_), &info) != 0 || !S_ISREG(info.st_mode)) return -1;
  return static_cast<std::int64_t>(info.st_size);
}

bool FileInput::peek(std::uint64_t offset, char* destination, std::size_t count) {
  // pread leaves the file position (and stdio's buffer, still empty) alone.
  const ssize_t got = pread(fileno(file_), destination, count, static_cast<off_t>(offset));
  return got >= 0 && static_cast<std::size_t>(got) == count;
}

std::size_t MemoryInput::read(char* destination, std::size_t capacity, std::string&) {
  const std::size_t n = std::min(capacity, bytes_.size());
  if (n > 0) std::memcpy(destination, bytes_.data(), n);
  bytes_.remove_prefix(n);
  return n;
}

bool MemoryInput::peek(std::uint64_t offset, char* destination, std::size_t count) {
  if (offset > bytes_.size() || count > bytes_.size() - offset) return false;
  std::memcpy(destination, bytes_.data() + offset, count);
  return true;
}

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
}  // namespace

void WholeDocument::Free::operator()(char* p) const noexcept {
  ::operator delete (p, std::align_val_t{alignment});
}

void WholeDocument::allocate(std::size_t size) {
  // Raw operator new, not new char[](): value-initialising would write every
  // page of a buffer that is about to be overwritten anyway. A large
  // document is aligned to 2 MiB and asks for transparent huge pages (Linux,
  // THP in "madvise" mode as Debian ships it): inflating the 15 MB V100 trace
  // then takes 8 page faults instead of ~3 800, and the scanner fewer TLB
  // misses. Without THP the advice is ignored.
  std::size_t bytes = size + kPadding;
  std::size_t alignment = 64;
  if (bytes >= 2 * kHugePage) {
    bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    alignment = kHugePage;
  }
  char* p = static_cast<char*>(::operator new (bytes, std::align_val_t{alignment}));
#if defined(MADV_HUGEPAGE)
  if (alignment == kHugePage) (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
  std::memset(p + size, 0, kPadding);
  data_ = std::unique_ptr<char, Free>(p, Free{alignment});
  storage_bytes_ = bytes;
  size_ = size;
}

namespace {

// Reads the rest of `input`, `expected` bytes by its size, into `out` in
// one piece. The buffer is not zero-filled first (a std::string's resize
// writes every byte: for the 15 MB of a plain trace, a memset and page
// faults for nothing) and grows only when the input turns out longer than
// announced (a file that grew since fstat is read whole all the same).
// False on a read error.
bool read_to_end(RawInput& input, std::size_t expected, InputBytes& out) {
  std::string error;
  std::size_t capacity = expected + 1;  // + 1: seeing one byte more says the input grew
  std::unique_ptr<char[]> buffer(new char[capacity]);
  std::size_t size = 0;
  for (;;) {
    if (size == capacity) {
      const std::size_t grown = std::max<std::size_t>(2 * capacity, 64 * 1024);
      std::unique_ptr<char[]> bigger(new char[grown]);
      std::memcpy(bigger.get(), buffer.get(), size);
      buffer = std::move(bigger);
      capacity = grown;
    }
    const std::size_t got = input.read(buffer.get() + size, capacity - size, error);
    size += got;
    if (!error.empty()) return false;
    if (got == 0) break;
  }
  out.data = std::move(buffer);
  out.size = size;
  return true;
}

}  // namespace

bool WholeDocumentLoader::inflates_gzip() {
#if STEPSCOPE_HAVE_LIBDEFLATE
  return true;
#else
  return false;
#endif
}

WholeDocumentLoader::Outcome WholeDocumentLoader::load(RawInput& input, std::size_t limit, WholeDocument& document,
                                                       const std::function<void(std::size_t)>& before_fill) {
  const std::int64_t total = input.size_hint();
  if (total < 0 || static_cast<std::uint64_t>(total) > limit) return Outcome::streamed;
  const auto size = static_cast<std::size_t>(total);
  unsigned char magic[2] = {0, 0};
  const bool gzip =
      size >= 2 && input.peek(0, reinterpret_cast<char*>(magic), 2) && magic[0] == 0x1f && magic[1] == 0x8b;
  if (gzip) {
#if STEPSCOPE_HAVE_LIBDEFLATE
    // 18 bytes: the smallest gzip member (10-byte header, 8-byte trailer).
    unsigned char trailer[4];
    if (size < 18 || !input.peek(size - 4, reinterpret_cast<char*>(trailer), 4)) return Outcome::streamed;
    // ISIZE, the member's uncompressed size modulo 2^32: only a hint (a
    // larger stream, or another member before this one, makes the inflate
    // below run out of room, and the stream is then read the usual way).
    const std::size_t announced = static_cast<std::size_t>(trailer[0]) | static_cast<std::size_t>(trailer[1]) << 8 |
                                  static_cast<std::size_t>(trailer[2]) << 16 |
                                  static_cast<std::size_t>(trailer[3]) << 24;
    if (announced > limit) return Outcome::streamed;
    document.allocate(announced);
    if (before_fill) before_fill(announced);
    compressed_view_ = input.in_memory();
    if (compressed_view_.size() != size) {
      if (!read_to_end(input, size, compressed_)) return Outcome::failed;
      compressed_view_ = compressed_.view();
    }
    struct Decompressor {
      libdeflate_decompressor* d = libdeflate_alloc_decompressor();
      ~Decompressor() {
        if (d != nullptr) libdeflate_free_decompressor(d);
      }
    } decompressor;
    if (decompressor.d == nullptr) throw std::bad_alloc();
    std::size_t used_in = 0, produced = 0;
    const libdeflate_result rc =
        libdeflate_gzip_decompress_ex(decompressor.d, compressed_view_.data(), compressed_view_.size(),
                                      document.data_.get(), announced, &used_in, &produced);
    if (rc == LIBDEFLATE_SUCCESS && used_in == compressed_view_.size() && produced == announced) {
      document.size_ = produced;
      document.compressed_bytes_ = compressed_view_.size();
      document.gzip_ = true;
      compressed_ = InputBytes();
      compressed_view_ = {};
      return Outcome::loaded;
    }
    document = WholeDocument();
    return Outcome::fallback;
#else
    return Outcome::streamed;
#endif
  }
  // Plain JSON.
  const std::string_view bytes = input.in_memory();
  if (bytes.size() == size && size > 0) {
    document.allocate(size);
    if (before_fill) before_fill(size);
    std::memcpy(document.data_.get(), bytes.data(), size);
    document.compressed_bytes_ = size;
    return Outcome::loaded;
  }
  // Straight into the document; only a file that grew since fstat takes a
  // second buffer and a copy.
  document.allocate(size);
  if (before_fill) before_fill(size);
  std::string error;
  std::size_t got = 0;
  for (;;) {
    // One byte into the padding: seeing it says the file is longer than `size`.
    const std::size_t n = input.read(document.data_.get() + got, size + 1 - got, error);
    got += n;
    if (!error.empty()) return Outcome::failed;
    if (n == 0 || got == size + 1) break;
  }
  if (got <= size) {
    document.size_ = got;
    std::memset(document.data_.get() + got, 0, WholeDocument::kPadding);
    document.compressed_bytes_ = got;
    return Outcome::loaded;
  }
  InputBytes longer;
  if (!read_to_end(input, 0, longer)) return Outcome::failed;
  InputBytes whole;
  whole.size = got + longer.size;
  whole.data.reset(new char[whole.size]);
  std::memcpy(whole.data.get(), document.data_.get(), got);
  if (longer.size > 0) std::memcpy(whole.data.get() + got, longer.data.get(), longer.size);
  document.allocate(whole.size);
  std::memcpy(document.data_.get(), whole.data.get(), whole.size);
  document.compressed_bytes_ = whole.size;
  return Outcome::loaded;
}

struct Decoder::ZState {
  z_stream stream{};
  bool initialised = false;
  ~ZState() {
    if (initialised) inflateEnd(&stream);
  }
};

Decoder::Decoder(std::unique_ptr<RawInput> input)
    : input_(std::move(input)), in_buffer_(kChunkBytes), z_(std::make_unique<ZState>()) {}

Decoder::~Decoder() = default;

bool Decoder::fill_input() {
  if (input_done_) return false;
  // Keep unconsumed bytes at the front.
  if (in_begin_ > 0) {
    std::memmove(in_buffer_.data(), in_buffer_.data() + in_begin_, in_end_ - in_begin_);
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  const std::size_t got = input_->read(in_buffer_.data() + in_end_, in_buffer_.size() - in_end_, error_);
  if (!error_.empty()) return false;
  if (got == 0) {
    input_done_ = true;
    return false;
  }
  in_end_ += got;
  compressed_bytes_ += got;
  return true;
}

bool Decoder::next(std::vector<char>& out) {
  if (!next_chunk(out)) return false;
  produced_bytes_ += out.size();
  if (produced_bytes_ <= output_limit_) return true;
  error_ = limit_error_;
  over_limit_ = true;
  out.clear();
  return false;
}

bool Decoder::next_chunk(std::vector<char>& out) {
  if (finished_ || !error_.empty()) {
    out.clear();
    return false;
  }
  if (!started_) {
    started_ = true;
    while (in_end_ - in_begin_ < 2 && fill_input()) {
    }
    if (!error_.empty()) {
      out.clear();
      return false;
    }
    gzip_ = in_end_ - in_begin_ >= 2 && static_cast<unsigned char>(in_buffer_[in_begin_]) == 0x1f &&
            static_cast<unsigned char>(in_buffer_[in_begin_ + 1]) == 0x8b;
  }
  if (gzip_) {
    const bool more = next_gzip(out);
    if (!more) out.clear();
    return more;
  }

  if (in_begin_ == in_end_ && !fill_input()) {
    out.clear();
    finished_ = true;
    return false;
  }
  out.assign(in_buffer_.begin() + static_cast<std::ptrdiff_t>(in_begin_),
             in_buffer_.begin() + static_cast<std::ptrdiff_t>(in_end_));
  in_begin_ = in_end_ = 0;
  return true;
}

bool Decoder::next_gzip(std::vector<char>& out) {
  z_stream& zs = z_->stream;
  if (!z_->initialised) {
    // 16 + MAX_WBITS: gzip wrapper only, so a zlib or raw stream is reported
    // as corrupt rather than silently misread.
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
      error_ = "cannot initialise zlib";
      return false;
    }
    z_->initialised = true;
    member_open_ = true;
  }
  // A recycled buffer already has this size: no zero-filling per chunk.
  out.resize(kChunkBytes);
  std::size_t produced = 0;
  while (produced < out.size()) {
    if (in_begin_ == in_end_ && !fill_input()) {
      if (!error_.empty()) return false;
      if (member_open_) {
        error_ = "gzip stream truncated after " + std::to_string(compressed_bytes_) + " compressed bytes (" +
                 std::to_string(zs.total_out) + " bytes of the last member decompressed)";
        return false;
      }
      finished_ = true;
      break;
    }
    if (!member_open_) {
      // Between members: only another gzip member or zero padding may follow.
      const auto first = static_cast<unsigned char>(in_buffer_[in_begin_]);
      if (first == 0) {
        ++in_begin_;
        continue;
      }
      if (first != 0x1f) {
        error_ = "unexpected data after the end of the gzip stream at compressed byte " +
                 std::to_string(compressed_bytes_ - (in_end_ - in_begin_));
        return false;
      }
      inflateReset(&zs);
      member_open_ = true;
    }
    zs.next_in = reinterpret_cast<Bytef*>(in_buffer_.data() + in_begin_);
    zs.avail_in = static_cast<uInt>(in_end_ - in_begin_);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(out.size() - produced);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    const std::size_t consumed = (in_end_ - in_begin_) - zs.avail_in;
    in_begin_ += consumed;
    produced = out.size() - zs.avail_out;
    if (rc == Z_STREAM_END) {
      member_open_ = false;
    } else if (rc == Z_BUF_ERROR) {
      // Needs more input; loop refills (or reports truncation).
      if (consumed == 0 && zs.avail_out != 0 && in_begin_ != in_end_) {
        error_ = "corrupt gzip data";
        return false;
      }
    } else if (rc != Z_OK) {
      error_ = std::string("corrupt gzip data near compressed byte ") +
               std::to_string(compressed_bytes_ - (in_end_ - in_begin_)) + ": " +
               (zs.msg != nullptr ? zs.msg : "inflate failed");
      return false;
    }
  }
  out.resize(produced);
  return produced > 0;
}

PipelinedDecoder::PipelinedDecoder(Decoder& decoder) : decoder_(decoder) {
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    start_failed_ = true;  // caller falls back to decoding inline
  }
}

PipelinedDecoder::~PipelinedDecoder() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PipelinedDecoder::run() {
  for (;;) {
    std::vector<char> buffer;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stop_ || ready_.size() < kQueueDepth; });
      if (stop_) break;
      if (!spare_.empty()) {
        buffer = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    bool more = false;
    try {
      more = decoder_.next(buffer);
    } catch (...) {
      more = false;  // bad_alloc: the decoder's error stays empty, parse reports truncation
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!more) {
      producer_done_ = true;
      changed_.notify_all();
      break;
    }
    ready_.push_back(std::move(buffer));
    changed_.notify_all();
  }
}

bool PipelinedDecoder::next(std::vector<char>& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (out.capacity() > 0) spare_.push_back(std::move(out));
  out = std::vector<char>();
  changed_.wait(lock, [this] { return !ready_.empty() || producer_done_; });
  if (ready_.empty()) return false;
  out = std::move(ready_.front());
  ready_.pop_front();
  changed_.notify_all();
  return true;
}

ChunkStreambuf::int_type ChunkStreambuf::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  consumed_before_ += static_cast<std::uint64_t>(egptr() - eback());
  for (;;) {
    bool more = false;
    try {
      more = pipeline_ != nullptr ? pipeline_->next(chunk_) : decoder_.next(chunk_);
    } catch (...) {
      more = false;
    }
    if (!more) {
      setg(nullptr, nullptr, nullptr);
      return traits_type::eof();
    }
    if (!chunk_.empty()) break;
  }
  setg(chunk_.data(), chunk_.data(), chunk_.data() + chunk_.size());
  return traits_type::to_int_type(*gptr());
}

ChunkWindow::ChunkWindow(Decoder& decoder, PipelinedDecoder* pipeline)
    : decoder_(&decoder),
      pipeline_(pipeline),
      data_(new char[Decoder::kChunkBytes + kPadding]()),
      capacity_(Decoder::kChunkBytes),
      begin_(data_.get()),
      end_(data_.get()) {}

ChunkWindow::ChunkWindow(const WholeDocument& document) : begin_(document.begin()), end_(document.end()) {}

bool ChunkWindow::refill(const char*& cursor) {
  if (decoder_ == nullptr) return false;  // a whole document: nothing follows
  char* const data = data_.get();
  const std::size_t keep = static_cast<std::size_t>(end_ - cursor);
  discarded_ += static_cast<std::uint64_t>(cursor - data);
  if (keep > 0 && cursor != data) std::memmove(data, cursor, keep);
  cursor = data;
  end_ = data + keep;
  for (;;) {
    bool more = false;
    try {
      more = pipeline_ != nullptr ? pipeline_->next(chunk_) : decoder_->next(chunk_);
    } catch (...) {
      more = false;  // bad_alloc: reads as a truncated stream; the caller falls back
    }
    if (!more) return false;
    if (!chunk_.empty()) break;
  }
  if (keep + chunk_.size() > capacity_) {
    const std::size_t grown = std::max(keep + chunk_.size(), 2 * capacity_);
    std::unique_ptr<char[]> bigger(new char[grown + kPadding]());
    std::memcpy(bigger.get(), data_.get(), keep);
    data_ = std::move(bigger);
    capacity_ = grown;
    begin_ = data_.get();
    cursor = data_.get();
  }
  std::memcpy(data_.get() + keep, chunk_.data(), chunk_.size());
  end_ = data_.get() + keep + chunk_.size();
  return true;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
