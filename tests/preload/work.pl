#!/usr/bin/perl
# Real work for perl under a preloaded malloc: regexes over a synthetic access
# log, hashes of hashes and arrays, sorts, string building and splitting.
# Prints only allocator-independent figures (hash keys are always sorted).
# Usage: work.pl [SCALE]   (SCALE=1 takes about a second under glibc)
use strict;
use warnings;

my $scale = shift // 1;
my $lines = 60000 * $scale;

# A deterministic generator (Park-Miller minimal standard), so the output
# does not depend on how perl seeds rand().
my $state = 20240917;
sub rnd {
    my ($n) = @_;
    $state = ($state * 16807) % 2147483647;
    return $state % $n;
}

my @methods = qw(GET GET GET POST PUT DELETE HEAD);
my @paths   = qw(/ /index.html /api/v1/items /api/v1/users /static/app.js
                 /static/style.css /login /logout /search /api/v2/orders);
my @agents  = ('curl/7.88', 'Mozilla/5.0 (X11; Linux x86_64)', 'python-requests/2.28',
               'Go-http-client/1.1', 'Wget/1.21');

# 1. Build a log as one big string, then split it back into lines.
my @log;
for my $i (1 .. $lines) {
    my $ip = join '.', 10, rnd(4), rnd(256), rnd(256);
    my $t  = sprintf '2024-03-%02d %02d:%02d:%02d', 1 + rnd(28), rnd(24), rnd(60), rnd(60);
    my $m  = $methods[rnd(scalar @methods)];
    my $p  = $paths[rnd(scalar @paths)];
    $p .= '?id=' . rnd(5000) . '&q=' . ('x' x rnd(20)) if rnd(3) == 0;
    my $st = (200, 200, 200, 301, 404, 500)[rnd(6)];
    push @log, qq{$ip - - [$t] "$m $p HTTP/1.1" $st } . rnd(100000) . qq{ "$agents[rnd(scalar @agents)]"};
}
my $text = join "\n", @log;
@log = ();
my @back = split /\n/, $text;
print "log ", scalar(@back), " lines ", length($text), " bytes\n";

# 2. Parse with regexes into hashes of hashes.
my (%by_status, %by_path, %by_ip, %bytes_by_method, %agent_words);
my $re = qr{^(\d+\.\d+\.\d+\.\d+) - - \[([^\]]+)\] "(\w+) ([^ ?"]+)(?:\?([^ "]*))? HTTP/1\.1" (\d{3}) (\d+) "([^"]*)"$};
my $bad = 0;
for my $l (@back) {
    if ($l =~ $re) {
        my ($ip, $t, $m, $p, $qs, $st, $b, $ua) = ($1, $2, $3, $4, $5, $6, $7, $8);
        $by_status{$st}++;
        $by_path{$p}{count}++;
        $by_path{$p}{bytes} += $b;
        push @{ $by_path{$p}{hours} }, (split /[ :]/, $t)[1] if $by_path{$p}{count} % 50 == 0;
        $by_ip{$ip}++;
        $bytes_by_method{$m} += $b;
        if (defined $qs) {
            my %q = map { split /=/, $_, 2 } split /&/, $qs;
            $by_path{$p}{ids}{ $q{id} }++ if defined $q{id};
        }
        $agent_words{lc $_}++ for $ua =~ /([A-Za-z]+)/g;
    } else {
        $bad++;
    }
}
print "unparsed $bad\n";
print "status ", join(' ', map {"$_=$by_status{$_}"} sort keys %by_status), "\n";
for my $p (sort { $by_path{$b}{count} <=> $by_path{$a}{count} || $a cmp $b } keys %by_path) {
    my $h = $by_path{$p};
    my $ids = scalar keys %{ $h->{ids} || {} };
    my @hours = sort { $a <=> $b } @{ $h->{hours} || [] };
    my %seen;
    my $uniq = join ',', grep { !$seen{$_}++ } @hours;
    printf "path %-18s %6d %12d ids=%d hours=%s\n", $p, $h->{count}, $h->{bytes}, $ids, $uniq;
}
my @top_ips = (sort { $by_ip{$b} <=> $by_ip{$a} || $a cmp $b } keys %by_ip)[0 .. 4];
print "ips ", scalar(keys %by_ip), " top ", join(',', map {"$_:$by_ip{$_}"} @top_ips), "\n";
print "methods ", join(' ', map {"$_=$bytes_by_method{$_}"} sort keys %bytes_by_method), "\n";
print "agent-words ", join(' ', map {"$_=$agent_words{$_}"} sort keys %agent_words), "\n";

# 3. Substitutions, tr, sprintf, reverse, join: many short-lived strings.
my ($vowels, $sum) = (0, 0);
for my $l (@back[0 .. ($#back < 30000 * $scale ? $#back : 30000 * $scale - 1)]) {
    (my $c = $l) =~ s/(\d+)/<$1>/g;
    $c =~ s/\s+/ /g;
    $vowels += ($c =~ tr/aeiouAEIOU//);
    $sum += length(reverse $c) + length(uc $c);
}
print "subst $vowels $sum\n";

# 4. Sorts: numeric, string, Schwartzian transform, sort of a big array.
my @nums = map { rnd(1000000) } 1 .. 100000 * $scale;
my @sorted = sort { $a <=> $b } @nums;
my @strs = sort map { sprintf '%x-%s', $_, 'k' x ($_ % 7) } @nums[0 .. 40000 * $scale - 1];
my @st = map { $_->[1] } sort { $a->[0] <=> $b->[0] or $a->[1] cmp $b->[1] }
         map { [length($_), $_] } @strs;
print "sort $sorted[0] $sorted[-1] $sorted[@sorted / 2] $strs[0] $strs[-1] $st[0] $st[-1]\n";

# 5. Grow and delete: hash churn.
my %churn;
for my $i (1 .. 150000 * $scale) {
    $churn{"k$i"} = [$i, "v" x ($i % 50)];
    delete $churn{ "k" . ($i - 100) } if $i > 100 && $i % 3;
}
my $left = 0;
$left += $churn{$_}[0] for keys %churn;
print "churn ", scalar(keys %churn), " $left\n";
print "done\n";
