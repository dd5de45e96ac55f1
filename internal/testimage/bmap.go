package testimage

import (
	"crypto/sha256"
	"fmt"
	"strings"
)

// Bmap is a .bmap of data as bmaptool create writes one (version 2.0,
// SHA-256), mapping the given ranges of blocks, first and last included.
func Bmap(data []byte, block int64, ranges [][2]int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<?xml version=\"1.0\" ?>\n<bmap version=\"2.0\">\n    <ImageSize> %d </ImageSize>\n    <BlockSize> %d </BlockSize>\n", len(data), block)
	fmt.Fprintf(&b, "    <BlocksCnt> %d </BlocksCnt>\n    <MappedBlocksCnt> 0 </MappedBlocksCnt>\n    <ChecksumType> sha256 </ChecksumType>\n", (int64(len(data))+block-1)/block)
	b.WriteString("    <BmapFileChecksum> " + strings.Repeat("0", 64) + " </BmapFileChecksum>\n    <BlockMap>\n")
	for _, r := range ranges {
		end := min((r[1]+1)*block, int64(len(data)))
		sum := sha256.Sum256(data[r[0]*block : end])
		span := fmt.Sprintf("%d-%d", r[0], r[1])
		if r[0] == r[1] {
			span = fmt.Sprint(r[0])
		}
		fmt.Fprintf(&b, "        <Range chksum=\"%x\"> %s </Range>\n", sum, span)
	}
	b.WriteString("    </BlockMap>\n</bmap>\n")
	return b.String()
}
