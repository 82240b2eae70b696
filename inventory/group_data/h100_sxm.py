gpu_model = "NVIDIA H100 80GB HBM3"
gpu_vendor = "nvidia"
expected_gpu_count = 8
desired_driver_version = "550.127.05"
required_cuda_versions = ["12.4"]
