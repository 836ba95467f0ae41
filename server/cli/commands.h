// Subcommands that need gRPC (serve). Builds without the server
// (DSERVE_WITH_SERVER=OFF, e.g. deploy/gpu-check.sh) link the empty
// implementation in no_server_commands.cc.
#pragma once

namespace CLI {
class App;
}

namespace dserve {

// Adds the server's subcommands to `app`.
void RegisterServerCommands(CLI::App& app);
// Runs whichever of them was parsed; returns the exit code.
int RunServerCommands(CLI::App& app);

}  // namespace dserve
