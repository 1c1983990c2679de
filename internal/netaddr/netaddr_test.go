package netaddr

import "testing"

func TestLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:8080": true, "127.0.0.1": true, "127.3.2.1:80": true,
		"::1": true, "[::1]": true, "[::1]:8080": true,
		"": false, "0.0.0.0:8080": false, "10.0.0.7": false, "tei.internal:8080": false, "[::]:80": false, "localhost.example": false,
	} {
		if got := Loopback(host); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:9000": true, "[::1]:80": true,
		"127.0.0.1": false, "localhost": false, ":8080": false, "0.0.0.0:8080": false, "10.1.2.3:80": false,
	} {
		if got := LoopbackAddr(addr); got != want {
			t.Errorf("LoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
