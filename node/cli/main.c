/* The `strata` command-line tool (see cli.h). */
#include <stdio.h>

#include "node/cli/cli.h"

int main(int argc, char **argv)
{
    return strata_cli_main(argc, argv, stdout, stderr);
}
