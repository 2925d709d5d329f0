/* api_batch.c: being written by engineer "items". */

typedef int strata_api_batch_placeholder;
