// LD_PRELOAD shim for tests/faults: a report directory on a hung network
// mount. stat()/lstat() of a path under $HUNG_FS_DIR, called on stepscope's
// collector thread (named "stepscope"), first creates $HUNG_FS_MARK and then
// never returns, as a hard NFS mount does. Every other caller is untouched.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

void hang_if_hung(const char* path) {
  const char* dir = std::getenv("HUNG_FS_DIR");
  if (dir == nullptr || path == nullptr || std::strstr(path, dir) == nullptr) return;
  char name[32] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  if (std::strcmp(name, "stepscope") != 0) return;
  if (const char* mark = std::getenv("HUNG_FS_MARK")) ::close(::creat(mark, 0644));
  for (;;) ::pause();
}

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
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
}
