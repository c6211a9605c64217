/* A minimal NVTX injection library: logs domain range pushes/pops, the way Nsight attaches. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static FILE *out;

static nvtxDomainHandle_t create_domain(const char *name) { return (nvtxDomainHandle_t)strdup(name); }
static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char *s) {
    (void)d; return (nvtxStringHandle_t)strdup(s);
}
static void name_category(nvtxDomainHandle_t d, uint32_t id, const char *name) {
    (void)d; fprintf(out, "category\t%u\t%s\n", id, name);
}
static int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    const char *msg = "";
    if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) msg = a->message.ascii;
    else if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED) msg = (const char *)a->message.registered;
    fprintf(out, "push\t%s\t%s\t%u\t%d\n", (const char *)d, msg, a->category, a->payloadType);
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
    *t[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)create_domain;
    *t[NVTX_CBID_CORE2_DomainRegisterStringA] = (NvtxFunctionPointer)register_string;
    *t[NVTX_CBID_CORE2_DomainNameCategoryA] = (NvtxFunctionPointer)name_category;
    *t[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)push;
    *t[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)pop;
    return 1;
}
