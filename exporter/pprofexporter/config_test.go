package pprofexporter

import (
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id      component.ID
		want    *Config
		wantErr string
	}{
		{id: component.NewID(typ), want: &Config{Directory: "out/profiles", MaxFiles: 60}},
		{id: component.NewIDWithName(typ, "custom"), want: &Config{Directory: "/var/lib/bpfcol/profiles", MaxFiles: 10}},
		{id: component.NewIDWithName(typ, "no_files"), wantErr: "max_files"},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			err = cfg.(*Config).Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if got := *cfg.(*Config); got != *tt.want {
				t.Errorf("config = %+v, want %+v", got, *tt.want)
			}
		})
	}
}

func TestValidateNamesFields(t *testing.T) {
	err := (&Config{Directory: "", MaxFiles: -1}).Validate()
	if err == nil {
		t.Fatal("Validate accepted an empty directory and max_files -1")
	}
	for _, field := range []string{"directory", "max_files"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %v, does not name %s", err, field)
		}
	}
}
