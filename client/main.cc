#include "client/cli.h"

int main(int argc, char** argv) { return dserve::RunClientCli(argc, argv); }
