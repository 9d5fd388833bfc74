// Compiled only to make the LibTorch precompiled header (cmake/TorchfarmBuildSpeed.cmake).
