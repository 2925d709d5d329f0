/* api_query.c: being written by engineer "items". */

typedef int strata_api_query_placeholder;
