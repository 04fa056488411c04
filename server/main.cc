// srformer-server entry point (the serving engine lands with the serving issue).
#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::cout << "usage: srformer-server --model NAME=DIR [--model NAME=DIR ...] [--listen HOST:PORT]\n"
                   "                       [--metrics-listen HOST:PORT] [--device cpu|cuda[:N]] [--config FILE]\n";
      return 0;
    }
  }
  std::cerr << "srformer-server: the serving engine is not built yet; see --help\n";
  return 2;
}
