package process

// MaxUserAddr is the highest user address: arm64's 48-bit virtual
// addresses (the kernel's default map window, even where 52 bits are
// configured).
const MaxUserAddr = 0x0000ffffffffffff
