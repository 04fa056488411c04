// srformer-client entry point (the client lands with the serving issue).
#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::cout << "usage: srformer-client --target HOST:PORT --model NAME [--stream] [--json] [options] [FILE|-]\n";
      return 0;
    }
  }
  std::cerr << "srformer-client: not built yet; see --help\n";
  return 2;
}
