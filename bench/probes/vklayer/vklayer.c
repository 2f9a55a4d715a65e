/* Experimental Vulkan layer for wgpu/naga investigations.
 * SPV_DUMP_DIR=dir : dump every SPIR-V module given to vkCreateShaderModule
 * NO_ROBUST=1      : clear robustBufferAccess / robustBufferAccess2 / robustImageAccess(2) at vkCreateDevice
 * PIPE_STATS=1     : enable VK_KHR_pipeline_executable_properties and print each compute pipeline's
 *                    driver statistics (registers, spills, ...) to stderr
 * PIPE_IR_DIR=dir  : (with PIPE_STATS) write each compute pipeline's internal representations
 * PIPE_CACHE_DIR=dir : build each compute pipeline into a fresh VkPipelineCache and write its data
 * SPV_REPLACE_DIR=dir : give the driver dir/<fnv1a64 of the module>.spv instead of a module, where
 *                    that file exists (the dump names carry the same hash) */
#include <vulkan/vulkan.h>
#include <vulkan/vk_layer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define EXPORT __attribute__((visibility("default")))
static PFN_vkGetInstanceProcAddr next_gipa;
static PFN_vkGetDeviceProcAddr next_gdpa;
static PFN_vkCreateShaderModule next_csm;
static PFN_vkCreateComputePipelines next_ccp;
static PFN_vkGetPipelineExecutablePropertiesKHR get_props;
static PFN_vkGetPipelineExecutableStatisticsKHR get_stats;
static PFN_vkGetPipelineExecutableInternalRepresentationsKHR get_irs;
static PFN_vkCreatePipelineCache next_cpc;
static PFN_vkGetPipelineCacheData next_gpcd;
static PFN_vkDestroyPipelineCache next_dpc;
static int pipe_counter;
static unsigned long long fnv(const void* p, size_t n) {
  const unsigned char* b = p; unsigned long long h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ULL; }
  return h;
}
static void* slurp(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb"); if (!f) return NULL;
  fseek(f, 0, SEEK_END); long sz = ftell(f); fseek(f, 0, SEEK_SET);
  if (sz <= 0) { fclose(f); return NULL; }
  void* d = malloc(sz); if (fread(d, 1, sz, f) != (size_t)sz) { free(d); fclose(f); return NULL; }
  fclose(f); *n = sz; return d;
}
static VkInstance g_inst;
static int counter, stats_on;
static int env(const char* n) { const char* v = getenv(n); return v && *v && strcmp(v, "0"); }
static VkResult VKAPI_CALL my_CreateInstance(const VkInstanceCreateInfo* ci, const VkAllocationCallbacks* a, VkInstance* inst) {
  VkLayerInstanceCreateInfo* li = (VkLayerInstanceCreateInfo*)ci->pNext;
  while (li && !(li->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && li->function == VK_LAYER_LINK_INFO)) li = (VkLayerInstanceCreateInfo*)li->pNext;
  if (!li) return VK_ERROR_INITIALIZATION_FAILED;
  next_gipa = li->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  li->u.pLayerInfo = li->u.pLayerInfo->pNext;
  VkResult r = ((PFN_vkCreateInstance)next_gipa(NULL, "vkCreateInstance"))(ci, a, inst);
  if (r == VK_SUCCESS) g_inst = *inst;
  return r;
}
static int has_ext(VkPhysicalDevice pd, const char* name) {
  PFN_vkEnumerateDeviceExtensionProperties f = (PFN_vkEnumerateDeviceExtensionProperties)next_gipa(g_inst, "vkEnumerateDeviceExtensionProperties");
  uint32_t n = 0; f(pd, NULL, &n, NULL);
  VkExtensionProperties* p = calloc(n, sizeof *p); f(pd, NULL, &n, p);
  int found = 0; for (uint32_t i = 0; i < n; i++) if (!strcmp(p[i].extensionName, name)) found = 1;
  free(p); return found;
}
static VkResult VKAPI_CALL my_CreateDevice(VkPhysicalDevice pd, const VkDeviceCreateInfo* ci0, const VkAllocationCallbacks* a, VkDevice* dev) {
  VkDeviceCreateInfo ci = *ci0;
  VkLayerDeviceCreateInfo* li = (VkLayerDeviceCreateInfo*)ci.pNext;
  while (li && !(li->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && li->function == VK_LAYER_LINK_INFO)) li = (VkLayerDeviceCreateInfo*)li->pNext;
  if (!li) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr gipa = li->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  next_gdpa = li->u.pLayerInfo->pfnNextGetDeviceProcAddr;
  li->u.pLayerInfo = li->u.pLayerInfo->pNext;
  VkPhysicalDeviceFeatures feats;
  if (env("NO_ROBUST")) {
    if (ci.pEnabledFeatures) { feats = *ci.pEnabledFeatures; feats.robustBufferAccess = 0; ci.pEnabledFeatures = &feats; }
    for (VkBaseOutStructure* p = (VkBaseOutStructure*)ci.pNext; p; p = p->pNext) {
      if (p->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2) ((VkPhysicalDeviceFeatures2*)p)->features.robustBufferAccess = 0;
      if (p->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT) { ((VkPhysicalDeviceRobustness2FeaturesEXT*)p)->robustBufferAccess2 = 0; ((VkPhysicalDeviceRobustness2FeaturesEXT*)p)->robustImageAccess2 = 0; }
      if (p->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES) ((VkPhysicalDeviceVulkan13Features*)p)->robustImageAccess = 0;
      if (p->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_IMAGE_ROBUSTNESS_FEATURES) ((VkPhysicalDeviceImageRobustnessFeatures*)p)->robustImageAccess = 0;
    }
    fprintf(stderr, "[vklayer] robustness features cleared\n");
  }
  const char* exts[256]; VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pef = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  if (env("PIPE_STATS") && !has_ext(pd, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) fprintf(stderr, "[vklayer] driver lacks VK_KHR_pipeline_executable_properties\n");
  if (env("PIPE_STATS") && has_ext(pd, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) && ci.enabledExtensionCount < 255) {
    memcpy(exts, ci.ppEnabledExtensionNames, ci.enabledExtensionCount * sizeof *exts);
    exts[ci.enabledExtensionCount] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    ci.ppEnabledExtensionNames = exts; ci.enabledExtensionCount++;
    pef.pipelineExecutableInfo = VK_TRUE; pef.pNext = (void*)ci.pNext; ci.pNext = &pef;
    stats_on = 1; fprintf(stderr, "[vklayer] pipeline executable statistics enabled\n");
  }
  VkResult r = ((PFN_vkCreateDevice)gipa(NULL, "vkCreateDevice"))(pd, &ci, a, dev);
  if (r == VK_SUCCESS) {
    next_csm = (PFN_vkCreateShaderModule)next_gdpa(*dev, "vkCreateShaderModule");
    next_ccp = (PFN_vkCreateComputePipelines)next_gdpa(*dev, "vkCreateComputePipelines");
    next_cpc = (PFN_vkCreatePipelineCache)next_gdpa(*dev, "vkCreatePipelineCache");
    next_gpcd = (PFN_vkGetPipelineCacheData)next_gdpa(*dev, "vkGetPipelineCacheData");
    next_dpc = (PFN_vkDestroyPipelineCache)next_gdpa(*dev, "vkDestroyPipelineCache");
    if (stats_on) {
      get_irs = (PFN_vkGetPipelineExecutableInternalRepresentationsKHR)next_gdpa(*dev, "vkGetPipelineExecutableInternalRepresentationsKHR");
      get_props = (PFN_vkGetPipelineExecutablePropertiesKHR)next_gdpa(*dev, "vkGetPipelineExecutablePropertiesKHR");
      get_stats = (PFN_vkGetPipelineExecutableStatisticsKHR)next_gdpa(*dev, "vkGetPipelineExecutableStatisticsKHR");
    }
  }
  return r;
}
static VkResult VKAPI_CALL my_CreateShaderModule(VkDevice d, const VkShaderModuleCreateInfo* ci, const VkAllocationCallbacks* a, VkShaderModule* m) {
  const char* dir = getenv("SPV_DUMP_DIR");
  unsigned long long h = fnv(ci->pCode, ci->codeSize);
  if (dir) { char p[512]; snprintf(p, sizeof p, "%s/shader_%03d_%016llx.spv", dir, counter++, h);
    FILE* fp = fopen(p, "wb"); if (fp) { fwrite(ci->pCode, 1, ci->codeSize, fp); fclose(fp); } }
  const char* rdir = getenv("SPV_REPLACE_DIR");
  if (rdir) { char p[512]; size_t n = 0; snprintf(p, sizeof p, "%s/%016llx.spv", rdir, h);
    void* code = slurp(p, &n);
    if (code) { VkShaderModuleCreateInfo c2 = *ci; c2.pCode = code; c2.codeSize = n;
      fprintf(stderr, "[vklayer] module %016llx replaced by %s (%zu -> %zu bytes)\n", h, p, ci->codeSize, n);
      VkResult r = next_csm(d, &c2, a, m); free(code); return r; } }
  return next_csm(d, ci, a, m);
}
static VkResult VKAPI_CALL my_CreateComputePipelines(VkDevice d, VkPipelineCache c, uint32_t n, const VkComputePipelineCreateInfo* ci, const VkAllocationCallbacks* a, VkPipeline* out) {
  const char* cdir = getenv("PIPE_CACHE_DIR"); const char* idir = getenv("PIPE_IR_DIR");
  if ((!stats_on || !get_props) && !cdir) return next_ccp(d, c, n, ci, a, out);
  if (n > 64) return next_ccp(d, c, n, ci, a, out);
  VkComputePipelineCreateInfo copy[64];
  for (uint32_t i = 0; i < n; i++) { copy[i] = ci[i];
    if (stats_on) copy[i].flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    if (stats_on && idir) copy[i].flags |= VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR; }
  VkPipelineCache own = VK_NULL_HANDLE;
  /* The caller's cache (wgpu passes none) is replaced by a fresh one, so its data is this pipeline's. */
  if (cdir) { VkPipelineCacheCreateInfo pc = {VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    if (next_cpc(d, &pc, NULL, &own) == VK_SUCCESS) c = own; else own = VK_NULL_HANDLE; }
  int id = pipe_counter++;
  VkResult r = next_ccp(d, c, n, copy, a, out);
  if (own) { size_t sz = 0; next_gpcd(d, own, &sz, NULL); void* data = malloc(sz); next_gpcd(d, own, &sz, data);
    char p[512]; snprintf(p, sizeof p, "%s/pipe_%03d.bin", cdir, id);
    FILE* fp = fopen(p, "wb"); if (fp) { fwrite(data, 1, sz, fp); fclose(fp); }
    fprintf(stderr, "[vklayer] pipeline %d: cache data %zu bytes -> %s\n", id, sz, p);
    free(data); next_dpc(d, own, NULL); }
  if (!stats_on || !get_props) return r;
  for (uint32_t i = 0; r == VK_SUCCESS && i < n; i++) {
    VkPipelineInfoKHR pi = {VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, NULL, out[i]};
    uint32_t ne = 0; get_props(d, &pi, &ne, NULL);
    for (uint32_t e = 0; e < ne; e++) {
      VkPipelineExecutableInfoKHR ei = {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, NULL, out[i], e};
      uint32_t ns = 0; get_stats(d, &ei, &ns, NULL);
      VkPipelineExecutableStatisticKHR* s = calloc(ns, sizeof *s);
      for (uint32_t k = 0; k < ns; k++) s[k].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
      get_stats(d, &ei, &ns, s);
      fprintf(stderr, "[vklayer] compute pipeline %p exec %u:", (void*)out[i], e);
      for (uint32_t k = 0; k < ns; k++) {
        switch (s[k].format) {
          case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: fprintf(stderr, " %s=%u;", s[k].name, s[k].value.b32); break;
          case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: fprintf(stderr, " %s=%lld;", s[k].name, (long long)s[k].value.i64); break;
          case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: fprintf(stderr, " %s=%llu;", s[k].name, (unsigned long long)s[k].value.u64); break;
          default: fprintf(stderr, " %s=%g;", s[k].name, s[k].value.f64);
        }
      }
      fprintf(stderr, "\n"); free(s);
      if (idir && get_irs) {
        uint32_t nr = 0; get_irs(d, &ei, &nr, NULL);
        VkPipelineExecutableInternalRepresentationKHR* ir = calloc(nr ? nr : 1, sizeof *ir);
        for (uint32_t k = 0; k < nr; k++) ir[k].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR;
        get_irs(d, &ei, &nr, ir);
        for (uint32_t k = 0; k < nr; k++) { ir[k].pData = malloc(ir[k].dataSize ? ir[k].dataSize : 1); }
        get_irs(d, &ei, &nr, ir);
        fprintf(stderr, "[vklayer] pipeline %d exec %u: %u internal representations\n", id, e, nr);
        for (uint32_t k = 0; k < nr; k++) {
          char p[512]; snprintf(p, sizeof p, "%s/pipe_%03d_%u_%u_%s.%s", idir, id, e, k, ir[k].name, ir[k].isText ? "txt" : "bin");
          for (char* q = p + strlen(idir) + 1; *q; q++) if (*q == ' ' || *q == '/') *q = '_';
          FILE* fp = fopen(p, "wb"); if (fp) { fwrite(ir[k].pData, 1, ir[k].dataSize, fp); fclose(fp); }
          free(ir[k].pData);
        }
        free(ir);
      }
    }
  }
  return r;
}
EXPORT PFN_vkVoidFunction VKAPI_CALL vklayer_GetDeviceProcAddr(VkDevice d, const char* n);
EXPORT PFN_vkVoidFunction VKAPI_CALL vklayer_GetInstanceProcAddr(VkInstance i, const char* n) {
  if (!strcmp(n, "vkCreateInstance")) return (PFN_vkVoidFunction)my_CreateInstance;
  if (!strcmp(n, "vkCreateDevice")) return (PFN_vkVoidFunction)my_CreateDevice;
  if (!strcmp(n, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)vklayer_GetInstanceProcAddr;
  if (!strcmp(n, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)vklayer_GetDeviceProcAddr;
  if (!strcmp(n, "vkCreateShaderModule")) return (PFN_vkVoidFunction)my_CreateShaderModule;
  if (!strcmp(n, "vkCreateComputePipelines")) return (PFN_vkVoidFunction)my_CreateComputePipelines;
  return next_gipa ? next_gipa(i, n) : NULL;
}
EXPORT PFN_vkVoidFunction VKAPI_CALL vklayer_GetDeviceProcAddr(VkDevice d, const char* n) {
  if (!strcmp(n, "vkCreateShaderModule")) return (PFN_vkVoidFunction)my_CreateShaderModule;
  if (!strcmp(n, "vkCreateComputePipelines")) return (PFN_vkVoidFunction)my_CreateComputePipelines;
  if (!strcmp(n, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)vklayer_GetDeviceProcAddr;
  return next_gdpa(d, n);
}
