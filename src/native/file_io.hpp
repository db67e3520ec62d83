// Reading byte ranges of a file with pread: a file truncated or replaced while it is read gives an error,
// never a SIGBUS (which a memory map of a truncated file raises).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#if defined(__linux__)
#include <linux/falloc.h>
#endif
#include <sys/stat.h>
#include <unistd.h>

namespace cntkio {

// The file ended before the requested range did (truncated since it was indexed).
struct ShortRead : std::runtime_error {
  int64_t offset;
  explicit ShortRead(int64_t at) : std::runtime_error("file ended early"), offset(at) {}
};

// Reads up to `size` bytes at `offset`; returns the number read (short only at the end of the file).
// Throws std::runtime_error on an I/O error.
inline int64_t read_some(int fd, int64_t offset, int64_t size, char* out) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, static_cast<size_t>(size - done), static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("read failed: ") + std::strerror(errno));
    }
    if (n == 0) break;
    done += n;
  }
  return done;
}

// Reads exactly `size` bytes at `offset`; throws ShortRead where the file ends first.
inline void read_exact(int fd, int64_t offset, int64_t size, char* out) {
  const int64_t done = read_some(fd, offset, size, out);
  if (done < size) throw ShortRead(offset + done);
}

// Frees the disk blocks of bytes [offset, offset + size) of the file open as fd, keeping its size (a hole reads as
// zeros). Returns 0, or the errno of the call; where the system cannot punch holes, does nothing (the blocks stay).
inline int release_range(int fd, int64_t offset, int64_t size) {
#if defined(__linux__) && defined(FALLOC_FL_PUNCH_HOLE)
  if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), static_cast<off_t>(size)) != 0) {
    return errno == EOPNOTSUPP ? 0 : errno;
  }
#else
  (void)fd;
  (void)offset;
  (void)size;
#endif
  return 0;
}

// Reads the whole file at `path` (regular file, pipe or device: up to its end) into `out`; returns 0, or the errno
// of the open, fstat or read that failed. The file is closed before returning.
inline int read_whole_file(const char* path, std::string& out) {
  // O_NONBLOCK: opening a FIFO put where a file was must not wait for a writer; what was opened is then checked,
  // so a path swapped after the caller's check is refused too (EISDIR for a directory, EINVAL for anything else
  // that is not a regular file: a FIFO, a socket, a device such as /dev/zero that never ends).
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errno;
  struct stat info;
  int error = ::fstat(fd, &info) != 0 ? errno : S_ISDIR(info.st_mode) ? EISDIR : !S_ISREG(info.st_mode) ? EINVAL : 0;
  int64_t done = 0;
  out.clear();
  while (error == 0) {
    // the size it had, plus one byte to see the end (or a block more, when it grew or has no size)
    const int64_t want = done < info.st_size ? info.st_size + 1 - done : int64_t{1} << 16;
    out.resize(static_cast<size_t>(done + want));
    const ssize_t n = ::read(fd, &out[static_cast<size_t>(done)], static_cast<size_t>(want));
    if (n < 0) {
      if (errno != EINTR) error = errno;
      continue;
    }
    if (n == 0) break;
    done += n;
  }
  ::close(fd);
  out.resize(static_cast<size_t>(done));
  return error;
}

}  // namespace cntkio
