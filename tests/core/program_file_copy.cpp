// A second process for ProgramIoTest: reads a Program file, checks it, writes it to another file.
//   usage: program_file_copy IN.json OUT.json
#include <cstdio>

#include "core/program/program_io.hpp"

int main(int argc, char** argv) {
    using namespace shardcast::core;
    if (argc != 3) {
        std::fprintf(stderr, "usage: program_file_copy IN.json OUT.json\n");
        return 2;
    }
    auto program = loadProgramFile(argv[1]);
    if (!program) {
        std::fprintf(stderr, "program_file_copy: %s\n", program.error().message.c_str());
        return 1;
    }
    if (auto st = writeProgramFile(argv[2], *program); !st) {
        std::fprintf(stderr, "program_file_copy: %s\n", st.error().message.c_str());
        return 1;
    }
    std::printf("program_file_copy: %d tasks, %zu memory events, %zu ops, %d buffers\n", program->size(),
                program->mem.size(), program->ops.size(), program->buffer_count);
    return 0;
}
