// Compiled only to make a shared precompiled header (cmake/TorchfarmBuildSpeed.cmake).
