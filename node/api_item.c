/* api_item.c: being written by engineer "items". */

typedef int strata_api_item_placeholder;
