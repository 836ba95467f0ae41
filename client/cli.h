// The `dserve-client` command line (DESIGN §3):
//   dserve-client [--target ADDR] [--lb round_robin|pick_first] [--tls-ca F] [--token-file F]
//                 [--timeout-ms N] [--max-attempts N] [--json] COMMAND
// COMMAND: classify, answer, rerank, models, health, load (see --help).
// Exit codes: 0 success; 1 the call failed (the gRPC code name and message
// go to stderr, and with --json also a {"error": {...}} object to stdout) or
// health is not SERVING; 2 bad usage or unreadable local files.
#pragma once

namespace dserve {

// Parses argv and runs the command. Not reentrant (call once per process).
int RunClientCli(int argc, char** argv);

}  // namespace dserve
