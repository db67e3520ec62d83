// A small driver for fuzz targets where libFuzzer is not available (g++): runs the target on every seed
// file given, then on random mutations of them (byte flips, inserted CTF and SCP tokens, cuts, splices) until the
// time budget runs out. Deterministic for a given --seed. An input that aborts the target is written to
// ./crash-input. Usage: fuzz_ctf [--seconds N] [--seed S] SEED...
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run, written to ./crash-input when the target aborts (to reproduce the failure).
const std::string* current = nullptr;

void save_input(int signal) {
  if (current != nullptr) {
    const int fd = ::open("crash-input", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      const ssize_t written = ::write(fd, current->data(), current->size());
      (void)written;
      ::close(fd);
    }
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = 1;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::ifstream file(argv[i], std::ios::binary);
      inputs.emplace_back(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    }
  }
  if (inputs.empty()) inputs.emplace_back("0 |a 1 2 3 |b 4:1\n");
  std::signal(SIGABRT, save_input);
  std::signal(SIGSEGV, save_input);
  for (const std::string& input : inputs) {
    current = &input;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  static const char* tokens[] = {"|", "|a ", "|b ", "|c ", "|#", ":", "\n", " ", "\t", "\r", "1e308", "-", ".",
                                 "3.5", "99999999999999999999", "0", "\xef\xbb\xbf", "\xff\xfe", "e", "|a", "\0",
                                 "=", "[", "]", ",", "..."};
  std::mt19937_64 rng(seed);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string data = inputs[rng() % inputs.size()];
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      const size_t at = data.empty() ? 0 : rng() % (data.size() + 1);
      switch (rng() % 5) {
        case 0:
          if (!data.empty()) data[at % data.size()] = static_cast<char>(rng());
          break;
        case 1:
          data.insert(at, tokens[rng() % (sizeof(tokens) / sizeof(tokens[0]))]);
          break;
        case 2:
          data.erase(at, rng() % 16);
          break;
        case 3:
          data.resize(at);
          break;
        default: {
          const std::string& other = inputs[rng() % inputs.size()];
          const size_t from = other.empty() ? 0 : rng() % other.size();
          data.insert(at, other, from, rng() % 64);
        }
      }
    }
    current = &data;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    ++runs;
  }
  std::printf("fuzz: %llu runs, no crash\n", static_cast<unsigned long long>(runs));
  return 0;
}
