#include "storage/base/err.h"

#include <stdio.h>
#include <string.h>

int strata_err_setv(strata_err *err, strata_code code, const char *fmt, va_list ap)
{
    if (err == NULL)
        return -1;
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return -1;
}

int strata_err_set(strata_err *err, strata_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strata_err_setv(err, code, fmt, ap);
    va_end(ap);
    return -1;
}

void strata_err_clear(strata_err *err)
{
    if (err == NULL)
        return;
    err->code = ERR_NONE;
    err->msg[0] = '\0';
}

static const char *const code_names[ERR_CODE_COUNT] = {
    [ERR_NONE] = "None",
    [ERR_VALIDATION] = "ValidationException",
    [ERR_SERIALIZATION] = "SerializationException",
    [ERR_CONDITIONAL_CHECK] = "ConditionalCheckFailedException",
    [ERR_RESOURCE_NOT_FOUND] = "ResourceNotFoundException",
    [ERR_RESOURCE_IN_USE] = "ResourceInUseException",
    [ERR_LIMIT_EXCEEDED] = "LimitExceededException",
    [ERR_THROUGHPUT_EXCEEDED] = "ProvisionedThroughputExceededException",
    [ERR_REQUEST_LIMIT] = "RequestLimitExceeded",
    [ERR_THROTTLING] = "ThrottlingException",
    [ERR_ITEM_COLLECTION_SIZE] = "ItemCollectionSizeLimitExceededException",
    [ERR_TRANSACTION_CANCELED] = "TransactionCanceledException",
    [ERR_TRANSACTION_CONFLICT] = "TransactionConflictException",
    [ERR_TRANSACTION_IN_PROGRESS] = "TransactionInProgressException",
    [ERR_IDEMPOTENT_MISMATCH] = "IdempotentParameterMismatchException",
    [ERR_MISSING_AUTH] = "MissingAuthenticationTokenException",
    [ERR_UNRECOGNIZED_CLIENT] = "UnrecognizedClientException",
    [ERR_INCOMPLETE_SIGNATURE] = "IncompleteSignatureException",
    [ERR_ACCESS_DENIED] = "AccessDeniedException",
    [ERR_UNKNOWN_OPERATION] = "UnknownOperationException",
    [ERR_INTERNAL] = "InternalServerError",
    [ERR_UNAVAILABLE] = "ServiceUnavailable",
    [ERR_IO] = "IoError",
    [ERR_CORRUPT] = "CorruptionError",
    [ERR_NOMEM] = "OutOfMemory",
    [ERR_NOT_FOUND] = "NotFound",
    [ERR_BUSY] = "Busy",
    [ERR_NEWER] = "NewerFormat",
};

const char *strata_code_name(strata_code code)
{
    if ((unsigned)code >= ERR_CODE_COUNT || code_names[code] == NULL)
        return "UnknownError";
    return code_names[code];
}
