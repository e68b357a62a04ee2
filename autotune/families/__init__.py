"""The built-in kernel families, each an implementation of ``autotune.core.family.KernelFamily``."""
