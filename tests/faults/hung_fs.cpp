// LD_PRELOAD shim for tests/faults: a report directory on a hung network
// mount. stat()/lstat()/open() of a path with $HUNG_FS_DIR in it, called on stepscope's
// collector thread (named "stepscope"), first creates $HUNG_FS_MARK and then
// never returns, as a hard NFS mount does (or, with $HUNG_FS_FOR_MS, returns
// that late once, as a slow one). Every other caller is untouched.
// And a serial line without carrier: a blocking open() for writing of
// $NO_CARRIER_DEV never returns (with O_NONBLOCK it opens).
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdlib>
#include <cstring>

extern "C" {
std::atomic<int> hung_fs_released{0};
}

namespace {

void hang_if_hung(const char* path) {
  const char* dir = std::getenv("HUNG_FS_DIR");
  if (dir == nullptr || path == nullptr || std::strstr(path, dir) == nullptr) return;
  char name[32] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  if (std::strcmp(name, "stepscope") != 0) return;
  if (const char* mark = std::getenv("HUNG_FS_MARK")) ::close(::creat(mark, 0644));
  // A slow mount instead: the first such call takes HUNG_FS_FOR_MS, then
  // hung_fs_released says so (the probe reads it with dlsym) and no call waits again.
  if (const char* ms = std::getenv("HUNG_FS_FOR_MS")) {
    if (hung_fs_released.load() == 0) ::usleep(static_cast<useconds_t>(std::atoi(ms)) * 1000);
    hung_fs_released.store(1);
    return;
  }
  for (;;) ::pause();
}

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

void hang_if_no_carrier(const char* path, int flags) {
  const char* dev = std::getenv("NO_CARRIER_DEV");
  if (dev == nullptr || path == nullptr || std::strcmp(path, dev) != 0) return;
  if ((flags & O_ACCMODE) == O_RDONLY || (flags & O_NONBLOCK) != 0) return;
  for (;;) ::pause();
}

// open() and open64(): hang where the case says, else the real one.
int opened(const char* name, const char* path, int flags, mode_t mode) {
  hang_if_hung(path);
  hang_if_no_carrier(path, flags);
  return next<int (*)(const char*, int, ...)>(name)(path, flags, mode);
}

mode_t mode_of(int flags, va_list args) {
  return (flags & (O_CREAT | O_TMPFILE)) != 0 ? static_cast<mode_t>(va_arg(args, unsigned)) : 0;
}

}  // namespace

extern "C" {
int stat(const char* path, struct stat* st) {
  hang_if_hung(path);
  return next<int (*)(const char*, struct stat*)>("stat")(path, st);
}
int lstat(const char* path, struct stat* st) {
  hang_if_hung(path);
  return next<int (*)(const char*, struct stat*)>("lstat")(path, st);
}
int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_of(flags, args);
  va_end(args);
  return opened("open", path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_of(flags, args);
  va_end(args);
  return opened("open64", path, flags, mode);
}
}
