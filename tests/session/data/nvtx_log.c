/* A minimal NVTX injection library, attached the way Nsight attaches: logs each domain's
 * creation, its category names and its range pushes (message, category, payload) and pops. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static FILE *out;

static nvtxDomainHandle_t create_domain(const char *name) {
    fprintf(out, "domain\t%s\n", name);
    return (nvtxDomainHandle_t)strdup(name);
}
static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char *s) {
    (void)d; return (nvtxStringHandle_t)strdup(s);
}
static void name_category(nvtxDomainHandle_t d, uint32_t id, const char *name) {
    fprintf(out, "category\t%s\t%u\t%s\n", (const char *)d, id, name);
}
/* The payload as text: "-" when the range carries none. */
static void payload_text(const nvtxEventAttributes_t *a, char *buf, size_t n) {
    switch (a->payloadType) {
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64: snprintf(buf, n, "%llu", (unsigned long long)a->payload.ullValue); break;
    case NVTX_PAYLOAD_TYPE_INT64: snprintf(buf, n, "%lld", (long long)a->payload.llValue); break;
    case NVTX_PAYLOAD_TYPE_DOUBLE: snprintf(buf, n, "%g", a->payload.dValue); break;
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32: snprintf(buf, n, "%u", a->payload.uiValue); break;
    case NVTX_PAYLOAD_TYPE_INT32: snprintf(buf, n, "%d", a->payload.iValue); break;
    case NVTX_PAYLOAD_TYPE_FLOAT: snprintf(buf, n, "%g", (double)a->payload.fValue); break;
    default: snprintf(buf, n, "-");
    }
}
static int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    const char *msg = "";
    char payload[64];
    if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) msg = a->message.ascii;
    else if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED) msg = (const char *)a->message.registered;
    payload_text(a, payload, sizeof payload);
    fprintf(out, "push\t%s\t%s\t%u\t%s\n", (const char *)d, msg, a->category, payload);
    return 0;
}
static int pop(nvtxDomainHandle_t d) { fprintf(out, "pop\t%s\n", (const char *)d); return 0; }

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable t; unsigned int n;
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", getenv("NVTX_LOG_FILE"), (int)getpid());
    if (!out) out = fopen(path, "w");  /* each NVTX copy in the process initializes us */
    if (!out || !cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n)) return 0;
    setvbuf(out, NULL, _IOLBF, 0);  /* whole lines even if the process dies */
    *t[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)create_domain;
    *t[NVTX_CBID_CORE2_DomainRegisterStringA] = (NvtxFunctionPointer)register_string;
    *t[NVTX_CBID_CORE2_DomainNameCategoryA] = (NvtxFunctionPointer)name_category;
    *t[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)push;
    *t[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)pop;
    return 1;
}
