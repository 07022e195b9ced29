// lmx command-line entry point: dispatches to one verb per subcommand.
#include <cstdio>
int main() { std::puts("lmx"); return 0; }
