package symbolize

// maxMappedFile bounds the size of a file mapped, and of a section
// decompressed into a file to be mapped.
const maxMappedFile = 1 << 40
