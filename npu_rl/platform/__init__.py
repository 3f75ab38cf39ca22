"""The Ascend host as npu-rl sees it: device nodes, CANN and driver versions,
`npu-smi` readings, and the host checks of the preflight (`npu-rl doctor`) built on them."""
