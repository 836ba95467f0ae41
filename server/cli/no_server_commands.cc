#include <iostream>

#include <CLI/CLI.hpp>

#include "server/cli/commands.h"

namespace dserve {

void RegisterServerCommands(CLI::App&) {}

int RunServerCommands(CLI::App&) {
  std::cerr << "dserve: this build has no server (configured with DSERVE_WITH_SERVER=OFF)\n";
  return 2;
}

}  // namespace dserve
