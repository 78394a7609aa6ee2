package launch

// GetDebs says where the vendor's packages come from and how to point at
// them: every message about missing packages ends with it.
const GetDebs = "the tests that judge softdev run MLNX_OFED 4.9's own libibverbs, programs and perftest from its .deb packages: " +
	"download MLNX_OFED_LINUX-4.9-7.1.0.0 (LTS) for your distribution from NVIDIA's MLNX_OFED download archive, " +
	"unpack it, and point OFED_DEBS at its DEBS/MLNX_LIBS directory (libibverbs1, libibverbs-dev, ibverbs-utils, perftest, librdmacm1, libibumad): " +
	"make test OFED_DEBS=/path/to/MLNX_OFED_LINUX-4.9-7.1.0.0-…/DEBS/MLNX_LIBS; nothing is installed, the packages are unpacked into a private cache"
