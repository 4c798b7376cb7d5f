//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"fmt"
)

var (
	_ [0]struct{} = [NoticeProcess - NoticeKind(profilerNoticeKindNOTICE_PROCESS)]struct{}{}
	_ [0]struct{} = [NoticeExit - NoticeKind(profilerNoticeKindNOTICE_EXIT)]struct{}{}
	_ [0]struct{} = [NoticeFile - NoticeKind(profilerNoticeKindNOTICE_FILE)]struct{}{}
	_ [0]struct{} = [NoticeRead - NoticeKind(profilerNoticeKindNOTICE_READ)]struct{}{}
)

// ReadNotice blocks until the next notice and decodes it into dst, whose
// Mappings are reused. It returns ErrClosed once the Sampler is closed.
// One goroutine reads notices; it may run beside the one reading samples.
func (s *Sampler) ReadNotice(dst *Notice) error {
	n, err := s.notices.Read()
	for errors.Is(err, ErrFlushed) { // PollNotices woke it
		n, err = s.notices.Read()
	}
	if err != nil {
		return err
	}
	switch k := NoticeKind(n.Kind); k {
	case NoticeProcess, NoticeExit, NoticeFile, NoticeRead:
		dst.Kind = k
	default:
		return fmt.Errorf("reading notice: unknown kind %d", n.Kind)
	}
	dst.PID, dst.KtimeNs, dst.CgroupID = n.Pid, n.Ktime, n.Cgroup
	dst.Exe = fileKeyOf(n.ExeDev, n.ExeIno)
	dst.Image = Image{MM: n.Proc.Mm, StartNs: n.Proc.StartNs, Reads: uint8(n.Proc.Flags >> 24)}
	dst.New = n.Flags&uint32(profilerNoticeFlagNOTICE_NEW) != 0
	dst.Overflow = n.Proc.Flags&uint32(profilerUnwindProcFlagUNWIND_PROC_OVERFLOW) != 0
	dst.Mappings = appendMappings(dst.Mappings[:0], &n.Proc)
	return nil
}

// PollNotices wakes ReadNotice when notices wait that woke no reader:
// exits are sent without a wakeup, read with the next notice that wakes,
// or at the latest when the caller, waking up regularly anyway, polls.
func (s *Sampler) PollNotices() {
	if s.notices.Pending() {
		_ = s.notices.Flush()
	}
}
