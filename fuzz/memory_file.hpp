// The fuzz input as a memory file descriptor, read by the parsers with pread like a real file.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

// A memfd holding `data`, or -1 (the caller skips the input).
inline int memory_file(const char* name, const uint8_t* data, size_t size) {
  const int fd = memfd_create(name, 0);
  if (fd < 0) return -1;
  for (size_t done = 0; done < size;) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return fd;
}
