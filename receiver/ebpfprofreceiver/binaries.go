package ebpfprofreceiver

import (
	"os"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/aggregate"
)

// aggregateBinaries hands the aggregator the symbolizer's binary cache, in
// the aggregator's terms: it keeps the binaries samples are in open for
// the resolver, and decodes frameless leaves from their code, each binary
// opened and indexed once for both. Nil without a cache.
func aggregateBinaries(c *symbolize.BinaryCache) aggregate.Binaries {
	if c == nil {
		return nil
	}
	return binaryCache{c}
}

// binaryCache is a symbolize.BinaryCache as aggregate.Binaries.
type binaryCache struct{ c *symbolize.BinaryCache }

func (b binaryCache) Open(key process.FileKey, open func() (*os.File, error)) (aggregate.Binary, error) {
	bin, err := b.c.Get(key, open)
	if err != nil {
		return nil, err
	}
	return openBinary{bin}, nil
}

// openBinary is a symbolize.Binary as aggregate.Binary: its ID, ReadCode
// and Release as they are.
type openBinary struct{ *symbolize.Binary }

func (b openBinary) FunctionAt(off uint64) (pc, start, end uint64, ok bool) {
	pc, ok = b.Mapper().FileOffsetToVirtualAddress(off)
	if !ok {
		return 0, 0, 0, false
	}
	start, end, ok = b.FunctionStart(pc)
	return pc, start, end, ok
}
