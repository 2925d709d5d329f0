/* partition.c: being written by engineer "items". */

typedef int strata_partition_placeholder;
